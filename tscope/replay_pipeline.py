"""run(request) -> ReplayOutcome: `tscope replay` as one call. The run's inputs are read once;
the replay, its what-ifs and resume checks run on them; the case is built from the same inputs with
the replay's findings ranked in; the case folder gets the case files, replay.json and the tables.

    outcome = run(ReplayRequest(Path("runs/exp1"), around=145, entry=Path("entry.py")))

investigate(run_dir, around) -> Investigation is the replay on its own: a baseline replay with
every per-layer statistic and per-sample attribution on the steps leading to `around`; each what-if
is a further replay from a checkpoint with one thing changed, judged against the baseline
(tscope.analyzers.replay).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UsageError
from tscope.ingest.inputs import Inputs, ReadOptions, read_inputs
from tscope.model import Finding, Run
from tscope.model.replay import InterventionOutcome, ReplayResult
from tscope.output_location import CASE_PREFIX, check_outside_inputs, default_output
from tscope.output_writer import FORMATS, write_case, write_replay_files
from tscope.replay.api import DEFAULT_WINDOW, replay
from tscope.replay.loop import ProgressCallback
from tscope.replay.select import checked_window
from tscope.replay.whatif import WhatIf, parse_what_if, skip_intervention, window_intervention

if TYPE_CHECKING:
    from tscope.model import Case

# --check-resume replays this many steps after each resume point.
RESUME_CHECK_STEPS = 5


@dataclass
class Investigation:
    run_dir: str
    result: ReplayResult  # the baseline replay, with bad samples, interventions and the cause
    findings: list[Finding]
    run: Run
    what_if_results: dict[str, ReplayResult] = field(default_factory=dict)
    skips: Any = None  # tscope.replay.skip_list.SkipSuggestion when samples were flagged
    resume_checks: list[ReplayResult] = field(default_factory=list)
    replays: Replays | None = None  # what investigate replayed, for judging other what-ifs


@dataclass(frozen=True)
class ReplayRequest:
    """What `tscope replay` was asked (docs/replay-schema.md; the CLI's options, parsed)."""

    run_dir: Path
    around: int | None  # None: --check-resume alone
    entry: Path | None
    window: tuple[int, int] = DEFAULT_WINDOW
    device: str = "cpu"
    deterministic: bool = True
    what_ifs: tuple[str, ...] = ()
    check_resume: bool = False
    statistics: bool = True
    nproc: int | None = None  # an FSDP2/DCP run replayed on N processes
    out: Path | None = None  # None: ./tscope-case-<run> (beside the run from inside it)
    formats: tuple[str, ...] = FORMATS
    trust_pickle: bool = False
    on_step: ProgressCallback | None = None
    on_default_folder: Callable[[Path], None] | None = None  # told the folder chosen for it


@dataclass(frozen=True)
class ReplayOutcome:
    investigation: Investigation
    case: Case
    written: list[Path]


def run(request: ReplayRequest) -> ReplayOutcome | None:
    """The replay asked for, its case and files; None on a torchrun rank other than 0 (rank 0
    writes the case)."""
    if request.entry is None:
        raise UsageError(
            "tscope replay needs --entry FILE.py defining batches(start_step): the batches "
            "the run consumed (see the README's replay section)."
        )
    around, entry, run_dir = request.around, request.entry, request.run_dir
    if around is None and not request.check_resume:
        raise UsageError("Give --around STEP (the step to investigate), or --check-resume.")
    if request.out is not None:
        check_outside_inputs(request.out, [run_dir])
    target = request.out or default_output(CASE_PREFIX, run_dir.resolve().name, [run_dir])
    if request.out is None and rank_zero() and request.on_default_folder is not None:
        request.on_default_folder(target)
    sharded = is_sharded(request.nproc)
    if sharded and (request.what_ifs or request.check_resume or around is None):
        raise UsageError(
            "A sharded replay (--nproc / torchrun) takes --around only: --what-if and "
            "--check-resume replay one process (docs/replay-schema.md, multi-node)."
        )
    for text in request.what_ifs:
        parse_what_if(text)  # bad specs fail before any work
    # Read once (rank 0 only): the replay compares with these logs, the case is built from them.
    inputs = (
        read_inputs([run_dir], ReadOptions(trust_pickle=request.trust_pickle))
        if (rank_zero())
        else None
    )
    common: dict[str, Any] = {
        "window": request.window,
        "device": request.device,
        "deterministic": request.deterministic,
        "statistics": request.statistics,
    }
    if sharded:
        from tscope.sharded_replay_pipeline import investigate_sharded

        assert around is not None
        found = investigate_sharded(
            run_dir,
            around,
            entry,
            nproc=request.nproc,
            run=inputs.run if inputs is not None else None,
            **common,
        )
        if found is None or inputs is None:  # another rank under torchrun: rank 0 writes
            return None
        investigation = found
    else:
        assert inputs is not None
        if around is not None:
            investigation = investigate(
                run_dir,
                around,
                entry,
                what_ifs=request.what_ifs,
                on_step=request.on_step,
                run=inputs.run,
                **common,
            )
        if request.check_resume:
            investigation = _with_resume_checks(
                investigation if around is not None else None, request, inputs
            )
    return _written(investigation, inputs, target, request.formats)


def _with_resume_checks(
    investigation: Investigation | None, request: ReplayRequest, inputs: Inputs
) -> Investigation:
    assert request.entry is not None
    checks, resume_findings = check_resumes(
        request.run_dir,
        request.entry,
        device=request.device,
        deterministic=request.deterministic,
        run=inputs.run,
    )
    if investigation is None:
        return resume_investigation(request.run_dir, checks, resume_findings, run=inputs.run)
    findings = [*investigation.findings, *resume_findings]
    return replace(investigation, resume_checks=checks, findings=findings)


def _written(
    investigation: Investigation, inputs: Inputs, target: Path, formats: tuple[str, ...]
) -> ReplayOutcome:
    from tscope.replay_case import replay_case

    case = replay_case(investigation, inputs)
    written = write_case(case, target, formats)
    written += write_replay_files(investigation, target)
    return ReplayOutcome(investigation, case, written)


def is_sharded(nproc: int | None) -> bool:
    from tscope.sharded_replay_pipeline import under_torchrun

    return (nproc is not None and nproc > 1) or under_torchrun()


def rank_zero() -> bool:
    """Under torchrun only rank 0 reads the inputs and writes the case."""
    return os.environ.get("RANK", "0") == "0"


def investigate(
    run_dir: str | Path,
    around: int,
    entry: str | Path,
    window: tuple[int, int] = DEFAULT_WINDOW,
    device: str = "cpu",
    deterministic: bool = True,
    what_ifs: Sequence[str] = (),
    statistics: bool = True,
    on_step: ProgressCallback | None = None,
    run: Run | None = None,
) -> Investigation:
    """`run`: the run's logs when the caller has read them (else they are read here). The
    investigation keeps its replays (`replays`): `judged(found.replays, some_what_ifs)` is the
    investigation of a subset, with no replay run again."""
    from tscope.replay.attribution import SampleAttribution, attribution_steps
    from tscope.replay.suite import StatisticsSuite

    experiments = [parse_what_if(text) for text in what_ifs]  # bad specs fail before any work
    run = run if run is not None else logs_of(run_dir)
    # Before the baseline replay runs (a refusal comes at once, not after minutes of replaying);
    # an explicit --window is replayed as asked, or refused.
    from_steps = [int(e.value or 0) for e in experiments if e.name == "from"]
    window, window_note = checked_window(
        Path(run_dir), around, window, run, from_steps, fit=window == DEFAULT_WINDOW
    )
    attribution = SampleAttribution(attribution_steps(around))
    observers: list[Any] = [attribution]  # first: it suspends the others' hooks for its passes
    suite = StatisticsSuite() if statistics else None
    if suite is not None:
        observers.append(suite)
    common: dict[str, Any] = {
        "entry": entry,
        "device": device,
        "deterministic": deterministic,
        "run": run,
    }
    baseline = replay(
        run_dir, around, window=window, on_step=on_step, observers=observers, **common
    )
    bad = attribution.bad_samples()
    what_if_results = {
        experiment.text: _what_if(run_dir, around, window, experiment, bad, common)
        for experiment in experiments
    }
    notes = tuple(suite.notes) if suite is not None else ()
    if window_note is not None:
        notes = (window_note, *notes)
    replays = Replays(run_dir, around, window, run, baseline, attribution, notes, what_if_results)
    return judged(replays, what_ifs)


@dataclass(frozen=True)
class Replays:
    """The replays of one investigation before they are judged: the baseline (with what its
    attribution and statistics observers found) and one replay per what-if, by its text."""

    run_dir: str | Path
    around: int
    window: tuple[int, int]
    run: Run
    baseline: ReplayResult
    attribution: Any  # tscope.replay.attribution.SampleAttribution, after the baseline
    notes: tuple[str, ...]  # the window fitted to a checkpoint, the statistics suite's
    what_if_results: dict[str, ReplayResult]


def judged(replays: Replays, what_ifs: Sequence[str]) -> Investigation:
    """The investigation of `what_ifs` (each one `replays` holds), judged against the baseline."""
    from tscope.analyzers.replay import cause_verdict, judge, replay_findings, spike_line
    from tscope.analyzers.signals import loss_series, primary_loss

    run, baseline, attribution = replays.run, replays.baseline, replays.attribution
    first, last = replays.around + replays.window[0], replays.around + replays.window[1]
    bad = attribution.bad_samples()
    skips = attribution.skip_suggestion()
    metric = primary_loss(run)
    logged = loss_series(run, metric) if metric else None
    reference = spike_line(baseline.per_step, first, logged)
    outcomes: list[InterventionOutcome] = []
    what_if_results: dict[str, ReplayResult] = {}
    for experiment in [parse_what_if(text) for text in what_ifs]:
        result = replays.what_if_results[experiment.text]
        what_if_results[experiment.text] = result
        outcomes.append(
            judge(
                experiment.name,
                result.interventions[0].params if result.interventions else experiment.params,
                baseline.per_step,
                result.per_step,
                (first, last),
                reference,
                result.checkpoint_step,
                own_level=experiment.name == "from",
            )
        )
    if not baseline.fidelity.reproduced:
        # The what-ifs change a replay that is not the run: they are no evidence about its cause.
        outcomes = [replace(outcome, conclusive=False) for outcome in outcomes]
    if replays.notes:
        restore = replace(baseline.restore, notes=baseline.restore.notes + replays.notes)
        baseline = replace(baseline, restore=restore)
    result = replace(
        baseline,
        bad_samples=bad,
        interventions=tuple(outcomes),
        sample_attribution=tuple(r.to_dict() for r in attribution.results),
        skip_suggestion=skips.to_dict() if bad else None,
        cause=cause_verdict(outcomes),
    )
    return Investigation(
        run_dir=str(replays.run_dir),
        result=result,
        findings=replay_findings(result),
        run=run,
        what_if_results=what_if_results,
        skips=skips if bad else None,
        replays=replays,
    )


def _what_if(
    run_dir: str | Path,
    around: int,
    window: tuple[int, int],
    experiment: WhatIf,
    bad: Any,
    common: dict[str, Any],
) -> ReplayResult:
    from tscope.model.replay import InterventionOutcome

    first, last = around + window[0], around + window[1]
    if experiment.name == "from":
        from_step = int(experiment.value or 0)
        if from_step >= first:
            raise UsageError(
                f"--what-if from={from_step}: pick a step before the window start {first}."
            )
        result = replay(run_dir, around, window=window, state_from=from_step, **common)
        marker = InterventionOutcome("from", {"from_step": from_step}, 0.0, False)
        return replace(result, interventions=(marker,))
    if experiment.name == "skip":
        intervention = skip_intervention(bad, around)
    else:
        intervention = window_intervention(experiment, first, last)
    result = replay(run_dir, around, window=window, interventions=[intervention], **common)
    marker = InterventionOutcome(intervention.name, intervention.params, 0.0, False)
    return replace(result, interventions=(marker,))


def check_resumes(
    run_dir: str | Path,
    entry: str | Path,
    device: str = "cpu",
    deterministic: bool = True,
    steps: int = RESUME_CHECK_STEPS,
    run: Run | None = None,
) -> tuple[list[ReplayResult], list[Finding]]:
    """Reload each checkpoint the run resumed from with everything it holds and recompute the
    first steps after the resume; a mismatch with the log is a replay_mismatch at the resume."""
    from tscope.analyzers.replay.mismatch import mismatch_findings

    run = run if run is not None else logs_of(run_dir)
    resumes = sorted({event.step for event in run.events_of("resume")})
    if not resumes:
        raise UsageError(
            f"{run_dir}: the logs show no resume (no step rewinds or restarts); nothing to check."
        )
    results, findings = [], []
    for step in resumes:
        arguments: dict[str, Any] = {
            "window": (0, steps - 1),
            "entry": entry,
            "device": device,
            "deterministic": deterministic,
            "run": run,
        }
        faithful = replay(run_dir, step, load_everything=True, **arguments)
        results.append(faithful)
        dropped: list[str] = []
        if not faithful.fidelity.reproduced:
            as_producer = replay(run_dir, step, **arguments)
            if as_producer.fidelity.reproduced:
                dropped = [note for note in as_producer.restore.notes if "not loaded" in note]
                dropped = dropped or ["state the producer's resume rule leaves out"]
        findings.extend(mismatch_findings(faithful, at_step=step, dropped=dropped))
    return results, findings


def resume_investigation(
    run_dir: str | Path,
    checks: list[ReplayResult],
    findings: list[Finding],
    run: Run | None = None,
) -> Investigation:
    """--check-resume on its own: the case shows the first resume's replay."""
    return Investigation(
        run_dir=str(run_dir),
        result=checks[0],
        findings=list(findings),
        run=run if run is not None else logs_of(run_dir),
        resume_checks=list(checks),
    )


def logs_of(run_dir: str | Path) -> Run:
    """The run's logs alone (no checkpoint statistics): what a replay compares with."""
    return read_inputs([run_dir], ReadOptions(read_weights=False)).run
