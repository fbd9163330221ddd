"""The command line: parses arguments and delegates to the library. Nothing else lives here.

`tscope --help` must stay fast: torch, scikit-learn and pandas are imported only by the commands
that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tscope.cli_help import PlainCommand, PlainGroup
from tscope.cli_options import (
    FORMATS,
    CaseOutOption,
    FormatsOption,
    NoWeightsOption,
    QuietOption,
    TrustPickleOption,
    parse_formats,
    parse_window,
    print_version,
)
from tscope.cli_output import (
    Progress,
    main_file,
    progress_enabled,
    say_where_it_goes,
    write_case,
)
from tscope.errors import TscopeError, UsageError
from tscope.model.visible_text import visible
from tscope.output_location import check_outside_inputs, default_output, report_folder

app = typer.Typer(
    cls=PlainGroup,
    add_completion=False,
    no_args_is_help=True,
)

SEVERITY_ORDER = ("info", "warning", "critical")
EXIT_FINDINGS = 1  # only with --fail-on
EXIT_BAD_INPUT = 2
CASE_PREFIX = "tscope-case"  # default output folders: ./tscope-case-<run>, ./tscope-cluster-<dir>
CLUSTER_PREFIX = "tscope-cluster"


def _fail(message: str) -> NoReturn:
    # visible(): a file name in the message may hold a newline or a terminal escape.
    typer.echo(f"tscope: error: {visible(message)}", err=True)
    raise typer.Exit(code=EXIT_BAD_INPUT)


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=print_version,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Offline post-mortem analyzer for LLM training runs: what happened, when, where, why."""


@app.command(cls=PlainCommand)
def analyze(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH...",
            help="Run directory (searched recursively), checkpoint or log file; several are merged.",
        ),
    ],
    out: CaseOutOption = None,
    formats: FormatsOption = "html,md,json",
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            metavar="SEVERITY",
            help="Exit 1 when a finding at or above this severity exists: info|warning|critical.",
        ),
    ] = None,
    trust_pickle: TrustPickleOption = False,
    no_weights: NoWeightsOption = False,
    quiet: QuietOption = False,
) -> None:
    """Analyze what a run left behind and write case.html, case.md and case.json (+ layers.parquet)."""
    from tscope.pipeline import analyze as analyze_run

    try:
        chosen = parse_formats(formats)
        if fail_on is not None and fail_on not in SEVERITY_ORDER:
            raise UsageError(
                f"--fail-on must be one of {', '.join(SEVERITY_ORDER)}, not {fail_on!r}"
            )
        if out is not None:
            check_outside_inputs(out, list(paths))  # before any work
        with Progress(progress_enabled(quiet), "reading") as progress:
            case = analyze_run(
                *paths,
                on_file=progress.update,
                trust_pickle=trust_pickle,
                read_weights=not no_weights,
            )
        target = out or default_output(CASE_PREFIX, str(case.run["name"]), list(paths))
        if out is None:
            say_where_it_goes(target, CASE_PREFIX, quiet)
        written = write_case(case, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        for item in case.partial:
            typer.echo(
                visible(f"tscope: warning: partial input {item['path']}: {item['problem']}"),
                err=True,
            )
    typer.echo(visible(main_file(written)))
    if fail_on is not None:
        threshold = SEVERITY_ORDER.index(fail_on)
        if any(SEVERITY_ORDER.index(f.severity) >= threshold for f in case.findings):
            raise typer.Exit(code=EXIT_FINDINGS)


@app.command(cls=PlainCommand)
def replay(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR",
            help="The run directory holding the checkpoints and logs (default: the current one).",
        ),
    ] = Path("."),
    around: Annotated[
        int | None,
        typer.Option(
            "--around",
            metavar="STEP",
            help="Required (unless --check-resume): the optimizer step to investigate.",
        ),
    ] = None,
    entry: Annotated[
        Path | None,
        typer.Option(
            "--entry",
            metavar="FILE.py",
            help="Required: your entry file. It defines batches(start_step), the batches of the "
            "steps after start_step, and optionally build_model(config), loss_fn(model, batch), "
            "build_optimizer(model) (see the README's replay section).",
        ),
    ] = None,
    window: Annotated[
        str,
        typer.Option(
            "--window", metavar="-A:B", help="Steps before:after --around to replay, e.g. -5:5."
        ),
    ] = "-5:5",
    device: Annotated[
        str,
        typer.Option(
            "--device", metavar="DEVICE", help="cpu, cuda, or auto (cuda when available)."
        ),
    ] = "cpu",
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="WHAT_IF",
            help="Repeatable: skip | lr=FACTOR | clip=MAX_NORM | from=STEP (each a replay).",
        ),
    ] = None,
    check_resume: Annotated[
        bool,
        typer.Option(
            "--check-resume",
            help="Also reload each checkpoint the run resumed from and check the first steps.",
        ),
    ] = False,
    relaxed: Annotated[
        bool,
        typer.Option("--relaxed", help="Allow non-deterministic kernels (faster, may drift)."),
    ] = False,
    no_stats: Annotated[
        bool, typer.Option("--no-stats", help="No per-layer statistics (a plain replay).")
    ] = False,
    out: CaseOutOption = None,
    formats: FormatsOption = "html,md,json",
    trust_pickle: TrustPickleOption = False,
    quiet: QuietOption = False,
) -> None:
    """Re-run the steps around a spike from a checkpoint and write a new case folder.

    Fidelity, per-layer statistics, bad samples and what-if experiments: --out gets replay.json,
    the replay tables and case.html/md/json with the replay's findings; the run is never touched.
    """
    from tscope.replay_pipeline import (
        case_with_replay,
        check_resumes,
        investigate,
        resume_investigation,
        write_replay_files,
    )

    try:
        chosen = parse_formats(formats)
        if entry is None:
            raise UsageError(
                "tscope replay needs --entry FILE.py defining batches(start_step): the batches "
                "the run consumed (see the README's replay section)."
            )
        if around is None and not check_resume:
            raise UsageError("Give --around STEP (the step to investigate), or --check-resume.")
        offsets = parse_window(window)
        if out is not None:
            check_outside_inputs(out, [run_dir])
        target = out or default_output(CASE_PREFIX, run_dir.resolve().name, [run_dir])
        if out is None:
            say_where_it_goes(target, CASE_PREFIX, quiet)
        with Progress(progress_enabled(quiet), "replaying") as progress:
            if around is not None:
                investigation = investigate(
                    run_dir,
                    around,
                    entry,
                    window=offsets,
                    device=device,
                    deterministic=not relaxed,
                    what_ifs=what_if or (),
                    statistics=not no_stats,
                    on_step=lambda done, total, _step: progress.advance(done, total),
                )
            if check_resume:
                checks, resume_findings = check_resumes(
                    run_dir, entry, device=device, deterministic=not relaxed
                )
                if around is None:
                    investigation = resume_investigation(run_dir, checks, resume_findings)
                else:
                    investigation.resume_checks = checks
                    investigation.findings.extend(resume_findings)
            case = case_with_replay(investigation, trust_pickle=trust_pickle)
        written = write_case(case, target, chosen)
        written += write_replay_files(investigation, target)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        from tscope.render.formatting import format_number  # the case's 3 significant digits

        fidelity = investigation.result.fidelity
        typer.echo(
            f"Replayed steps {investigation.result.steps[0]}–{investigation.result.steps[1]} "
            f"from {visible(investigation.result.checkpoint_path)}: "
            + (
                "reproduces the log"
                if fidelity.reproduced
                else "does NOT reproduce the log (see replay_mismatch)"
            )
            + f" (max relative loss difference {format_number(fidelity.max_rel_loss_diff)})",
            err=True,
        )
    typer.echo(visible(main_file(written)))


@app.command(cls=PlainCommand)
def xray(
    run_dir: Annotated[
        Path | None,
        typer.Argument(
            metavar="RUN_DIR",
            help="A Hugging Face Trainer run (training_args.bin); with --entry, the run whose case "
            "gets the audit's findings.",
        ),
    ] = None,
    entry: Annotated[
        Path | None,
        typer.Option(
            "--entry",
            metavar="FILE.py",
            help="Your entry file defining train_step(model, sequences).",
        ),
    ] = None,
    lengths: Annotated[
        str | None,
        typer.Option(
            "--lengths", metavar="N,N,...", help="Probe sequence lengths, e.g. 5,9,3,12,7,4."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="DIR", help="Case directory to write (default: ./tscope-xray-NAME)."
        ),
    ] = None,
    formats: FormatsOption = "html,md,json",
    quiet: QuietOption = False,
) -> None:
    """Audit a training step on a tracer model: the gradient weight of every target token, and
    gradient leaking between sequences. Writes xray.json and case.html/md/json."""
    from tscope.xray.probe import parse_lengths
    from tscope.xray_pipeline import audit, case_with_xray, write_xray_files

    try:
        chosen = parse_formats(formats)
        probe_lengths = parse_lengths(lengths) if lengths is not None else None
        named = entry if entry is not None else run_dir
        if named is None:
            raise UsageError(
                "Give --entry FILE.py (defining train_step(model, sequences)) or a Hugging Face "
                "Trainer run directory."
            )
        inputs = [run_dir] if run_dir is not None else []
        if out is not None:
            check_outside_inputs(out, inputs)
        target = out or default_output("tscope-xray", named.resolve().stem, inputs)
        with Progress(progress_enabled(quiet), "auditing the step"):
            result = audit(run_dir, entry, probe_lengths)
            case = case_with_xray(result)
        written = write_case(case, target, chosen)
        written += write_xray_files(result, target)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        section = case.xray or {}
        typer.echo(
            f"Token audit: weights match {section.get('matched_rule')} "
            f"(intended {section.get('intended')}); max leak {section.get('leak', {}).get('max')}; "
            f"{len(result.findings)} finding(s).",
            err=True,
        )
    typer.echo(visible(main_file(written)))


def _parse_window(text: str) -> tuple[int, int]:
    before, sep, after = text.partition(":")
    try:
        low, high = int(before), int(after)
    except ValueError:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER, e.g. -5:5.") from None
    if not sep or low > 0 or high < 0:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER around --around, e.g. -5:5.")
    return low, high


@app.command(cls=PlainCommand)
def cluster(
    runs_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUNS_DIR",
            help="A folder with one sub-folder (or log file) per run; links inside it work (see --follow-run-links).",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Where to write (default: ./tscope-cluster-NAME, or beside RUNS_DIR from inside it).",
        ),
    ] = None,
    formats: FormatsOption = "html,md,json",
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Runs analyzed in parallel (default: CPU count).",
        ),
    ] = None,
    trust_pickle: TrustPickleOption = False,
    no_weights: NoWeightsOption = False,
    follow_run_links: Annotated[
        bool,
        typer.Option(
            "--follow-run-links",
            help="Read runs that are symlinks to folders outside RUNS_DIR (only links you made).",
        ),
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Compare the runs of a sweep: which blew up, what they share, what the stable ones do not.

    Writes cluster.html, cluster.md and cluster.json, and each run's case under OUT/runs/ (reused
    on the next call while the run's files are unchanged).
    """
    from tscope.cluster_pipeline import cluster as cluster_runs
    from tscope.cluster_pipeline import find_runs
    from tscope.render.cluster_report import render_cluster

    try:
        chosen = parse_formats(formats)
        # Symlinked runs live elsewhere: the output may not land inside any of them either.
        inputs = [runs_dir, *find_runs(runs_dir, follow_run_links)]
        if out is not None:
            check_outside_inputs(out, inputs)
        target = out or default_output(CLUSTER_PREFIX, runs_dir.resolve().name, inputs)
        if out is None:
            say_where_it_goes(target, CLUSTER_PREFIX, quiet)
        with Progress(progress_enabled(quiet), "analyzing runs") as progress:
            result = cluster_runs(
                runs_dir,
                target,
                jobs=jobs,
                read_weights=not no_weights,
                trust_pickle=trust_pickle,
                on_run_done=progress.advance,
                follow_run_links=follow_run_links,
            )
        written = render_cluster(result, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        for item in result.skipped:
            typer.echo(
                visible(f"tscope: warning: run {item['run']} skipped: {item['problem']}"), err=True
            )
    typer.echo(visible(main_file(written)))


@app.command(cls=PlainCommand)
def report(
    case_dir: Annotated[
        Path, typer.Argument(metavar="CASE_DIR", help="A case directory (or its case.json).")
    ],
    formats: FormatsOption = "html,md,json",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Where to write (default: the case dir)."),
    ] = None,
) -> None:
    """Re-render a case from its case.json, with no recomputation."""
    from tscope.render import load_case_payload, render_case

    try:
        chosen = parse_formats(formats)
        payload = load_case_payload(case_dir)
        target = report_folder(case_dir, out)
        written = render_case(payload, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    for path in written:
        typer.echo(visible(path))


@app.command(cls=PlainCommand)
def demo(
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", metavar="DIR", help="Where to write the demo run and its case."
        ),
    ] = Path("tscope-demo"),
    quiet: QuietOption = False,
) -> None:
    """Train a tiny GPT on CPU with a planted LR jump, analyze the run, print the case path."""
    from tscope.demo.train import make_demo_run
    from tscope.pipeline import analyze as analyze_run

    try:
        with Progress(progress_enabled(quiet), "training demo") as progress:
            demo_run = make_demo_run(out / "run", progress=progress.advance)
        case = analyze_run(demo_run.run_dir)
        written = write_case(case, out / "case", FORMATS)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        typer.echo(
            f"Planted: learning rate ×{demo_run.lr_factor:g} at step {demo_run.planted_step} for "
            f"{demo_run.window_steps} steps. Verdict: {case.summary.get('verdict', '')}",
            err=True,
        )
    typer.echo(visible(main_file(written)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
