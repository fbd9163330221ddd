"""The command line: parses arguments and delegates to the library. Nothing else lives here.

`tscope --help` must stay fast: torch, scikit-learn and pandas are imported only by the commands
that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tscope.cli_audit import replay, xray
from tscope.cli_help import PlainCommand, PlainGroup
from tscope.cli_options import (
    FORMATS,
    CaseOutOption,
    FormatsOption,
    NoWeightsOption,
    QuietOption,
    TrustPickleOption,
    parse_formats,
    print_version,
)
from tscope.cli_output import (
    CASE_PREFIX,
    Progress,
    fail,
    main_file,
    progress_enabled,
    say_where_it_goes,
    write_case,
)
from tscope.errors import TscopeError, UsageError
from tscope.ingest.remote_source import local_inputs
from tscope.model.categories import SEVERITIES, at_least
from tscope.model.visible_text import visible
from tscope.output_location import check_outside_inputs, default_output, report_folder

app = typer.Typer(
    cls=PlainGroup,
    add_completion=False,
    no_args_is_help=True,
)

EXIT_FINDINGS = 1  # only with --fail-on
CLUSTER_PREFIX = "tscope-cluster"


app.command(cls=PlainCommand)(replay)
app.command(cls=PlainCommand)(xray)


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
        list[str],
        typer.Argument(
            metavar="PATH...",
            help="Run directory (searched recursively), checkpoint or log file, or a URL "
            "(s3://, gs://, hf://: needs the remote extra); several are merged.",
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
        if fail_on is not None and fail_on not in SEVERITIES:
            raise UsageError(
                f"--fail-on must be one of {', '.join(reversed(SEVERITIES))}, not {fail_on!r}"
            )
        if out is not None:
            check_outside_inputs(out, local_inputs(paths))  # before any work
        with Progress(progress_enabled(quiet), "reading") as progress:
            case = analyze_run(
                *paths,
                on_file=progress.update,
                trust_pickle=trust_pickle,
                read_weights=not no_weights,
            )
        target = out or default_output(CASE_PREFIX, case.run.name, local_inputs(paths))
        if out is None:
            say_where_it_goes(target, CASE_PREFIX, quiet)
        written = write_case(case, target, chosen)
    except TscopeError as error:
        fail(str(error))
    if not quiet:
        for item in case.partial:
            typer.echo(
                visible(f"tscope: warning: partial input {item.path}: {item.problem}"),
                err=True,
            )
    typer.echo(visible(main_file(written)))
    if fail_on is not None and any(at_least(f.severity, fail_on) for f in case.findings):
        raise typer.Exit(code=EXIT_FINDINGS)


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
        fail(str(error))
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
    from tscope.render import load_case, render_case

    try:
        chosen = parse_formats(formats)
        case = load_case(case_dir)
        target = report_folder(case_dir, out)
        written = render_case(case, target, chosen)
    except TscopeError as error:
        fail(str(error))
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
        fail(str(error))
    if not quiet:
        typer.echo(
            f"Planted: learning rate ×{demo_run.lr_factor:g} at step {demo_run.planted_step} for "
            f"{demo_run.window_steps} steps. Verdict: {case.summary.verdict}",
            err=True,
        )
    typer.echo(visible(main_file(written)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
