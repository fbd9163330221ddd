"""The command line: parses arguments and delegates to the library. Nothing else lives here.

`tscope --help` must stay fast: torch, scikit-learn and pandas are imported only by the commands
that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tscope.child_python import guard_child_pythons
from tscope.cli_audit import replay, xray
from tscope.cli_help import PlainCommand, PlainGroup
from tscope.cli_options import (
    CaseOutOption,
    FormatsOption,
    NoWeightsOption,
    QuietOption,
    TrustPickleOption,
    parse_formats,
    print_version,
)
from tscope.cli_output import (
    Progress,
    fail,
    main_file,
    progress_enabled,
    say_where_it_goes,
)
from tscope.errors import TscopeError, UsageError
from tscope.model.categories import SEVERITIES, at_least
from tscope.model.visible_text import visible
from tscope.output_location import CASE_PREFIX, CLUSTER_PREFIX

app = typer.Typer(
    cls=PlainGroup,
    add_completion=False,
    no_args_is_help=True,
)

EXIT_FINDINGS = 1  # only with --fail-on


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
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            metavar="NAME_OR_ID",
            help="The run to read from an input holding several (an MLflow SQLite store, "
            "mlflow.db): its name or the start of its id.",
        ),
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Analyze what a run left behind and write case.html, case.md and case.json (+ layers.parquet)."""
    from tscope.commands import AnalyzeRequest
    from tscope.commands import analyze as analyze_command

    try:
        chosen = parse_formats(formats)
        if fail_on is not None and fail_on not in SEVERITIES:
            raise UsageError(
                f"--fail-on must be one of {', '.join(reversed(SEVERITIES))}, not {fail_on!r}"
            )
        with Progress(progress_enabled(quiet), "reading") as progress:
            outcome = analyze_command(
                AnalyzeRequest(
                    paths,
                    out=out,
                    formats=chosen,
                    read_weights=not no_weights,
                    trust_pickle=trust_pickle,
                    run=run,
                    on_file=progress.update,
                    on_default_folder=lambda target: say_where_it_goes(target, CASE_PREFIX, quiet),
                )
            )
    except TscopeError as error:
        fail(str(error))
    case, written = outcome.case, outcome.written
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
            help="A folder with one sub-folder (or log file) per run, or an MLflow store "
            "(mlflow.db); links inside it work (see --follow-run-links).",
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
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help="Where the runs are analyzed: local (a process pool) or dask (the fleet extra).",
        ),
    ] = "local",
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="A running Dask scheduler, e.g. tcp://host:8786 (default: a local cluster).",
        ),
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Compare the runs of a sweep: which blew up, what they share, what the stable ones do not.

    Writes cluster.html, cluster.md and cluster.json, and each run's case under OUT/runs/ (reused
    on the next call while the run's files are unchanged).
    """
    from tscope.commands import ClusterRequest
    from tscope.commands import cluster as cluster_command

    try:
        chosen = parse_formats(formats)
        with Progress(progress_enabled(quiet), "analyzing runs") as progress:
            outcome = cluster_command(
                ClusterRequest(
                    runs_dir,
                    out=out,
                    formats=chosen,
                    jobs=jobs,
                    read_weights=not no_weights,
                    trust_pickle=trust_pickle,
                    follow_run_links=follow_run_links,
                    on_run_done=progress.advance,
                    on_default_folder=lambda target: say_where_it_goes(
                        target, CLUSTER_PREFIX, quiet
                    ),
                    engine=engine,
                    scheduler=scheduler,
                )
            )
    except TscopeError as error:
        fail(str(error))
    result, written = outcome.report, outcome.written
    if not quiet:
        for item in result.skipped:
            typer.echo(
                visible(f"tscope: warning: run {item['run']} skipped: {item['problem']}"), err=True
            )
        out_dir = Path(main_file(written)).parent  # the run's case path is relative to it
        for profile in result.profiles:
            if profile.unread_files:
                typer.echo(
                    visible(
                        f"tscope: warning: run {profile.name} read in part: "
                        f"{profile.unread_files} file(s) not read (listed in "
                        f"{out_dir / profile.case_path})"
                    ),
                    err=True,
                )
    typer.echo(visible(main_file(written)))


@app.command(cls=PlainCommand)
def report(
    case_dir: Annotated[
        Path,
        typer.Argument(
            metavar="CASE_DIR", help="A case directory (or its case.json), or a cluster report's."
        ),
    ],
    formats: FormatsOption = "html,md,json",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Where to write (default: the case dir)."),
    ] = None,
) -> None:
    """Re-render a case from its case.json (a cluster report from its cluster.json), with no
    recomputation."""
    from tscope.commands import report as report_command

    try:
        written = report_command(case_dir, out, parse_formats(formats))
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
    from tscope.commands import demo as demo_command

    try:
        with Progress(progress_enabled(quiet), "training demo") as progress:
            outcome = demo_command(out, on_progress=progress.advance)
    except TscopeError as error:
        fail(str(error))
    demo_run, case, written = outcome.demo_run, outcome.case, outcome.written
    if not quiet:
        typer.echo(
            f"Planted: learning rate ×{demo_run.lr_factor:g} at step {demo_run.planted_step} for "
            f"{demo_run.window_steps} steps. Verdict: {case.summary.verdict}",
            err=True,
        )
    typer.echo(visible(main_file(written)))


def main() -> None:
    guard_child_pythons()  # before any command can start a worker (child_python.py)
    app()


if __name__ == "__main__":
    main()
