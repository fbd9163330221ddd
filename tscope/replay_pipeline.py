"""investigate(run_dir, around) -> Investigation: the replay, its attribution and what-ifs, and
the findings they support; write_investigation() writes replay.json and updates the case.

    investigation = investigate("runs/exp1", around=145, entry="entry.py", what_ifs=["skip"])
    write_investigation(investigation, "case-dir")

A baseline replay runs with every per-layer statistic and per-sample attribution on the steps
leading to `around`; each what-if is a further replay from a checkpoint with one thing changed,
judged against the baseline (tscope.analyzers.replay).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from tscope.errors import UsageError
from tscope.model import Finding, Run
from tscope.model.case import json_safe
from tscope.model.replay import InterventionOutcome, ReplayResult
from tscope.model.replay_section import ReplaySection
from tscope.output_files import prepare_folder, write_text, write_with
from tscope.replay.api import DEFAULT_WINDOW, replay
from tscope.replay.loop import ProgressCallback
from tscope.replay.whatif import WhatIf, parse_what_if, skip_intervention, window_intervention

REPLAY_JSON = "replay.json"
STEPS_TABLE = "replay_steps.parquet"
LAYERS_TABLE = "replay_layers.parquet"
SAMPLES_TABLE = "replay_samples.parquet"
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
) -> Investigation:
    from tscope.analyzers.replay import cause_verdict, judge, replay_findings, spike_line
    from tscope.analyzers.signals import loss_series, primary_loss
    from tscope.pipeline import analyze_run
    from tscope.replay.attribution import SampleAttribution, attribution_steps
    from tscope.replay.suite import StatisticsSuite

    experiments = [parse_what_if(text) for text in what_ifs]  # bad specs fail before any work
    run = analyze_run(run_dir, read_weights=False).run
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
    skips = attribution.skip_suggestion()
    first, last = around + window[0], around + window[1]
    metric = primary_loss(run)
    logged = loss_series(run, metric) if metric else None
    reference = spike_line(baseline.per_step, first, logged)
    outcomes: list[InterventionOutcome] = []
    what_if_results: dict[str, ReplayResult] = {}
    for experiment in experiments:
        result = _what_if(run_dir, around, window, experiment, bad, common)
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
    if suite is not None and suite.notes:
        restore = replace(baseline.restore, notes=baseline.restore.notes + tuple(suite.notes))
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
        run_dir=str(run_dir),
        result=result,
        findings=replay_findings(result),
        run=run,
        what_if_results=what_if_results,
        skips=skips if bad else None,
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
) -> tuple[list[ReplayResult], list[Finding]]:
    """Reload each checkpoint the run resumed from with everything it holds and recompute the
    first steps after the resume; a mismatch with the log is a replay_mismatch at the resume."""
    from tscope.analyzers.replay.mismatch import mismatch_findings
    from tscope.pipeline import analyze_run

    run = analyze_run(run_dir, read_weights=False).run
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
    run_dir: str | Path, checks: list[ReplayResult], findings: list[Finding]
) -> Investigation:
    """--check-resume on its own: the case shows the first resume's replay."""
    from tscope.pipeline import analyze_run

    run = analyze_run(run_dir, read_weights=False).run
    return Investigation(
        run_dir=str(run_dir),
        result=checks[0],
        findings=list(findings),
        run=run,
        resume_checks=list(checks),
    )


def write_replay_files(investigation: Investigation, out_dir: Path) -> list[Path]:
    """replay.json, the per-step tables and skip_batches.json (never into the run directory)."""
    import pandas as pd

    from tscope.replay.skip_list import write_skip_batches

    prepare_folder(out_dir, "the replay")
    result = investigation.result
    payload = result.to_dict()
    if investigation.resume_checks:
        payload["resume_checks"] = [check.to_dict() for check in investigation.resume_checks]
    written = [_write_json(out_dir / REPLAY_JSON, payload)]
    steps = pd.DataFrame(
        [
            {
                "step": s.step,
                "loss": s.loss,
                "grad_norm": s.grad_norm,
                "learning_rate": s.learning_rate,
                "samples": s.samples,
                "update_skipped": s.update_skipped,
                "seconds": s.seconds,
            }
            for s in result.per_step
        ]
    )
    written.append(write_with(out_dir / STEPS_TABLE, partial(steps.to_parquet, index=False)))
    layers = pd.DataFrame(
        [
            {"step": s.step, "layer": layer, "statistic": name, "value": value}
            for s in result.per_step
            for layer, values in s.layers.items()
            for name, value in values.items()
            if isinstance(value, (int, float))
        ],
        columns=["step", "layer", "statistic", "value"],
    )
    written.append(write_with(out_dir / LAYERS_TABLE, partial(layers.to_parquet, index=False)))
    samples = pd.DataFrame(
        [
            {"step": s.step, "index": index, "loss": loss}
            for s in result.per_step
            for index, loss in enumerate(s.per_sample_loss)
        ],
        columns=["step", "index", "loss"],
    )
    written.append(write_with(out_dir / SAMPLES_TABLE, partial(samples.to_parquet, index=False)))
    if investigation.skips is not None and investigation.skips.batches:
        written.append(write_skip_batches(out_dir, investigation.skips, investigation.run_dir))
    return written


def _write_json(path: Path, payload: dict[str, Any]) -> Path:
    return write_text(
        path,
        json.dumps(payload, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
    )


# The case's replay section charts at most this many layers per statistic (largest peak first).
CASE_MAX_LAYERS = 24


def case_with_replay(
    investigation: Investigation, read_weights: bool = True, trust_pickle: bool = False
) -> Any:
    """The run's case with the replay's findings ranked in and a `replay` section added."""
    from tscope.pipeline import analyze_run

    case = analyze_run(
        investigation.run_dir,
        read_weights=read_weights,
        trust_pickle=trust_pickle,
        extra_findings=investigation.findings,
    ).case
    case.replay = ReplaySection.from_dict(json_safe(replay_section(investigation)))
    return case


def replay_section(investigation: Investigation) -> dict[str, Any]:
    """What case.json keeps of the replay (replay.json has everything)."""
    result = investigation.result
    payload = result.to_dict()
    compared = {c["step"]: c for c in payload["comparisons"]}
    section: dict[str, Any] = {
        "checkpoint": payload["checkpoint"],
        "steps": payload["steps"],
        "around": result.around,
        "window": list(result.window),
        "device": result.device,
        "deterministic": result.deterministic,
        "fidelity": payload["fidelity"],
        "restore": payload["restore"],
        "cause": result.cause,
        "per_step": [
            {
                "step": s.step,
                "loss": s.loss,
                "logged_loss": compared.get(s.step, {}).get("logged_loss"),
                "grad_norm": s.grad_norm,
                "learning_rate": s.learning_rate,
                "update_skipped": s.update_skipped,
            }
            for s in result.per_step
        ],
        "bad_samples": payload["bad_samples"],
        "interventions": payload["interventions"],
        "layer_series": layer_series(result),
        "files": [REPLAY_JSON, STEPS_TABLE, LAYERS_TABLE, SAMPLES_TABLE],
    }
    if investigation.skips is not None and investigation.skips.batches:
        section["files"].append("skip_batches.json")
    if investigation.resume_checks:
        section["resume_checks"] = [
            {
                "checkpoint": check.checkpoint_path,
                "steps": list(check.steps),
                "reproduced": check.fidelity.reproduced,
                "max_rel_loss_diff": check.fidelity.max_rel_loss_diff,
            }
            for check in investigation.resume_checks
        ]
    return section


def layer_series(result: ReplayResult) -> dict[str, dict[str, Any]]:
    """{statistic: {layers, steps, values (layers × steps)}} for the per-layer charts."""
    steps = [s.step for s in result.per_step]
    by_stat: dict[str, dict[str, dict[int, float]]] = {}
    for s in result.per_step:
        for layer, values in s.layers.items():
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    by_stat.setdefault(name, {}).setdefault(layer, {})[s.step] = float(value)
    series: dict[str, dict[str, Any]] = {}
    for name, layers in sorted(by_stat.items()):

        def peak(layer: str, table: dict[str, dict[int, float]] = layers) -> float:
            finite = [v for v in table[layer].values() if v == v and abs(v) != float("inf")]
            return max((abs(v) for v in finite), default=float("inf"))

        chosen = sorted(layers, key=lambda layer: (-peak(layer), layer))[:CASE_MAX_LAYERS]
        series[name] = {
            "layers": chosen,
            "steps": steps,
            "values": [[layers[layer].get(step) for step in steps] for layer in chosen],
        }
    return series
