"""The command line: parses arguments and delegates to the library. Nothing else lives here.

`tscope --help` must stay fast: torch, scikit-learn and pandas are imported only by the commands
that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tscope.cli_output import Progress, main_file, progress_enabled, write_case
from tscope.errors import TscopeError, UsageError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Offline post-mortem analyzer for LLM training runs: what happened, when, where, why.",
)

FORMATS = ("html", "md", "json")
SEVERITY_ORDER = ("info", "warning", "critical")
EXIT_FINDINGS = 1  # only with --fail-on
EXIT_BAD_INPUT = 2


def _fail(message: str) -> NoReturn:
    typer.echo(f"tscope: error: {message}", err=True)
    raise typer.Exit(code=EXIT_BAD_INPUT)


def _parse_formats(text: str) -> tuple[str, ...]:
    formats = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(
            f"Unknown format {', '.join(unknown) or text!r}; use any of html, md, json."
        )
    return formats


def _check_output_outside_inputs(out: Path, inputs: list[Path]) -> None:
    resolved = out.resolve()
    for path in inputs:
        root = path.resolve()
        root = root if root.is_dir() else root.parent
        if resolved == root or root in resolved.parents:
            raise UsageError(
                f"--out {out} is inside the input {path}; tscope never writes into an input. "
                "Choose an output directory elsewhere."
            )


QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress or warnings on stderr.")
]
FormatsOption = Annotated[
    str, typer.Option("--format", "-f", help="Comma-separated: html, md, json.")
]
TrustPickleOption = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="DANGEROUS: unpickle legacy files (runs code from them). Only for files you trust.",
    ),
]
NoWeightsOption = Annotated[
    bool,
    typer.Option(
        "--no-weights", help="Skip checkpoint tensors: logs and checkpoint inventory only."
    ),
]


@app.command()
def analyze(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Run directory (searched recursively), checkpoint or log file."),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Case directory to write (default: ./tscope-case-RUN)."),
    ] = None,
    formats: FormatsOption = "html,md,json",
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
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
        chosen = _parse_formats(formats)
        if fail_on is not None and fail_on not in SEVERITY_ORDER:
            raise UsageError(
                f"--fail-on must be one of {', '.join(SEVERITY_ORDER)}, not {fail_on!r}"
            )
        if out is not None:
            _check_output_outside_inputs(out, list(paths))  # before any work
        with Progress(progress_enabled(quiet), "reading") as progress:
            case = analyze_run(
                *paths,
                on_file=progress.update,
                trust_pickle=trust_pickle,
                read_weights=not no_weights,
            )
        target = out or Path(f"tscope-case-{case.run['name']}")
        _check_output_outside_inputs(target, list(paths))
        written = write_case(case, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        for item in case.partial:
            typer.echo(
                f"tscope: warning: partial input {item['path']}: {item['problem']}", err=True
            )
    typer.echo(str(main_file(written)))
    if fail_on is not None:
        threshold = SEVERITY_ORDER.index(fail_on)
        if any(SEVERITY_ORDER.index(f.severity) >= threshold for f in case.findings):
            raise typer.Exit(code=EXIT_FINDINGS)


@app.command()
def replay(
    run_dir: Annotated[
        Path, typer.Argument(help="The run directory holding the checkpoints and logs.")
    ] = Path("."),
    around: Annotated[
        int | None, typer.Option("--around", help="The optimizer step to investigate.")
    ] = None,
    entry: Annotated[
        Path | None,
        typer.Option("--entry", help="Your entry file: batches(start_step), optional build_model…"),
    ] = None,
    window: Annotated[
        str, typer.Option("--window", help="Steps before:after --around to replay, e.g. -5:5.")
    ] = "-5:5",
    device: Annotated[
        str, typer.Option("--device", help="cpu, cuda, or auto (cuda when available).")
    ] = "cpu",
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
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
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Case directory to write (default: ./tscope-case-RUN)."),
    ] = None,
    formats: FormatsOption = "html,md,json",
    trust_pickle: TrustPickleOption = False,
    quiet: QuietOption = False,
) -> None:
    """Re-run the steps around a spike from a checkpoint: fidelity, per-layer statistics, bad
    samples and what-if experiments. Writes replay.json and updates case.html/md/json."""
    from tscope.replay_pipeline import (
        case_with_replay,
        check_resumes,
        investigate,
        resume_investigation,
        write_replay_files,
    )

    try:
        chosen = _parse_formats(formats)
        if entry is None:
            raise UsageError(
                "tscope replay needs --entry FILE.py defining batches(start_step): the batches "
                "the run consumed (see the README's replay section)."
            )
        if around is None and not check_resume:
            raise UsageError("Give --around STEP (the step to investigate), or --check-resume.")
        offsets = _parse_window(window)
        target = out or Path(f"tscope-case-{run_dir.resolve().name}")
        _check_output_outside_inputs(target, [run_dir])
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
        fidelity = investigation.result.fidelity
        typer.echo(
            f"Replayed steps {investigation.result.steps[0]}–{investigation.result.steps[1]} "
            f"from {investigation.result.checkpoint_path}: "
            + (
                "reproduces the log"
                if fidelity.reproduced
                else "does NOT reproduce the log (see replay_mismatch)"
            )
            + f" (max rel. loss diff {fidelity.max_rel_loss_diff})",
            err=True,
        )
    typer.echo(str(main_file(written)))


@app.command()
def xray(
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="A Hugging Face Trainer run (training_args.bin); not with --entry."),
    ] = None,
    entry: Annotated[
        Path | None,
        typer.Option("--entry", help="Your entry file defining train_step(model, sequences)."),
    ] = None,
    lengths: Annotated[
        str | None,
        typer.Option("--lengths", help="Probe sequence lengths, e.g. 5,9,3,12,7,4."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Case directory to write (default: ./tscope-xray-NAME)."),
    ] = None,
    formats: FormatsOption = "html,md,json",
    quiet: QuietOption = False,
) -> None:
    """Audit a training step on a tracer model: the gradient weight of every target token, and
    gradient leaking between sequences. Writes xray.json and case.html/md/json."""
    from tscope.xray.probe import parse_lengths
    from tscope.xray_pipeline import audit, case_with_xray, write_xray_files

    try:
        chosen = _parse_formats(formats)
        probe_lengths = parse_lengths(lengths) if lengths is not None else None
        named = entry if entry is not None else run_dir
        if named is None:
            raise UsageError(
                "Give --entry FILE.py (defining train_step(model, sequences)) or a Hugging Face "
                "Trainer run directory."
            )
        target = out or Path(f"tscope-xray-{named.resolve().stem}")
        _check_output_outside_inputs(target, [run_dir] if run_dir is not None else [])
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
    typer.echo(str(main_file(written)))


def _parse_window(text: str) -> tuple[int, int]:
    before, sep, after = text.partition(":")
    try:
        low, high = int(before), int(after)
    except ValueError:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER, e.g. -5:5.") from None
    if not sep or low > 0 or high < 0:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER around --around, e.g. -5:5.")
    return low, high


@app.command()
def cluster(
    runs_dir: Annotated[
        Path,
        typer.Argument(help="A folder with one sub-folder (or log file) per run; symlinks work."),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Where to write (default: ./tscope-cluster-NAME)."),
    ] = None,
    formats: FormatsOption = "html,md,json",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Runs analyzed in parallel (default: CPU count)."),
    ] = None,
    trust_pickle: TrustPickleOption = False,
    no_weights: NoWeightsOption = False,
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
        chosen = _parse_formats(formats)
        target = out or Path(f"tscope-cluster-{runs_dir.resolve().name}")
        # Symlinked runs live elsewhere: the output may not land inside any of them either.
        _check_output_outside_inputs(target, [runs_dir, *find_runs(runs_dir)])
        with Progress(progress_enabled(quiet), "analyzing runs") as progress:
            result = cluster_runs(
                runs_dir,
                target,
                jobs=jobs,
                read_weights=not no_weights,
                trust_pickle=trust_pickle,
                on_run_done=progress.advance,
            )
        written = render_cluster(result, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    if not quiet:
        for item in result.skipped:
            typer.echo(f"tscope: warning: run {item['run']} skipped: {item['problem']}", err=True)
    typer.echo(str(main_file(written)))


@app.command()
def report(
    case_dir: Annotated[Path, typer.Argument(help="A case directory (or its case.json).")],
    formats: FormatsOption = "html,md,json",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Where to write (default: the case dir).")
    ] = None,
) -> None:
    """Re-render a case from its case.json, with no recomputation."""
    from tscope.render import load_case_payload, render_case

    try:
        chosen = _parse_formats(formats)
        payload = load_case_payload(case_dir)
        target = out or (case_dir if case_dir.is_dir() else case_dir.parent)
        written = render_case(payload, target, chosen)
    except TscopeError as error:
        _fail(str(error))
    for path in written:
        typer.echo(str(path))


@app.command()
def demo(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the demo run and its case.")
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
    typer.echo(str(main_file(written)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
