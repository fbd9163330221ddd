"""The commands that run the user's own code beside a stranger's run: `replay` (the entry's
batches and model around a step) and `xray` (the entry's training step on a tracer model).

Registered on the app by tscope.cli; like it, they only parse arguments and delegate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tscope.cli_options import (
    CaseOutOption,
    FormatsOption,
    QuietOption,
    TrustPickleOption,
    parse_formats,
    parse_window,
)
from tscope.cli_output import (
    Progress,
    fail,
    main_file,
    progress_enabled,
    say_where_it_goes,
)
from tscope.errors import TscopeError
from tscope.model.visible_text import visible
from tscope.output_location import CASE_PREFIX, XRAY_PREFIX

if TYPE_CHECKING:
    from tscope.model.replay import Fidelity


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
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            metavar="N",
            help="Replay an FSDP2 run from its DCP checkpoint on N processes (gloo on CPU, nccl "
            "on CUDA); under torchrun the processes it started are used.",
        ),
    ] = None,
    out: CaseOutOption = None,
    formats: FormatsOption = "html,md,json",
    trust_pickle: TrustPickleOption = False,
    quiet: QuietOption = False,
) -> None:
    """Re-run the steps around a spike from a checkpoint and write a new case folder.

    Fidelity, per-layer statistics, bad samples and what-if experiments: --out gets replay.json,
    the replay tables and case.html/md/json with the replay's findings; the run is never touched.
    """
    from tscope.replay_pipeline import ReplayRequest, rank_zero
    from tscope.replay_pipeline import run as replay_run

    try:
        with Progress(progress_enabled(quiet) and rank_zero(), "replaying") as progress:
            outcome = replay_run(
                ReplayRequest(
                    run_dir,
                    around,
                    entry,
                    formats=parse_formats(formats),
                    window=parse_window(window),
                    device=device,
                    deterministic=not relaxed,
                    what_ifs=tuple(what_if or ()),
                    check_resume=check_resume,
                    statistics=not no_stats,
                    nproc=nproc,
                    out=out,
                    trust_pickle=trust_pickle,
                    on_step=lambda done, total, _step: progress.advance(done, total),
                    on_default_folder=lambda target: say_where_it_goes(target, CASE_PREFIX, quiet),
                )
            )
    except TscopeError as error:
        fail(str(error))
    if outcome is None:  # a rank other than 0 under torchrun: rank 0 writes the case
        return
    investigation, written = outcome.investigation, outcome.written
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
            + f" (max relative loss difference {format_number(fidelity.max_rel_loss_diff)}"
            + _rounding_note(fidelity)
            + ")",
            err=True,
        )
    typer.echo(visible(main_file(written)))


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
            "--out",
            "-o",
            metavar="DIR",
            help="Case directory to write (default: ./tscope-xray-NAME).",
        ),
    ] = None,
    formats: FormatsOption = "html,md,json",
    quiet: QuietOption = False,
) -> None:
    """Audit a training step on a tracer model: the gradient weight of every target token, and
    gradient leaking between sequences. Writes xray.json and case.html/md/json."""
    from tscope.xray.probe import parse_lengths
    from tscope.xray_pipeline import XrayRequest
    from tscope.xray_pipeline import run as xray_run

    try:
        chosen = parse_formats(formats)
        probe_lengths = parse_lengths(lengths) if lengths is not None else None
        with Progress(progress_enabled(quiet), "auditing the step"):
            outcome = xray_run(
                XrayRequest(
                    run_dir,
                    entry,
                    probe_lengths,
                    out=out,
                    formats=chosen,
                    on_default_folder=lambda target: say_where_it_goes(target, XRAY_PREFIX, quiet),
                )
            )
    except TscopeError as error:
        fail(str(error))
    case, result, written = outcome.case, outcome.audit, outcome.written
    if not quiet:
        section = case.xray
        # visible(): the intended rule can come from the user's --entry file.
        typer.echo(
            visible(
                f"Token audit: weights match {section and section.matched_rule} "
                f"(intended {section and section.intended}); max leak "
                f"{section and section.leak_max}; {len(result.findings)} finding(s)."
            ),
            err=True,
        )
    typer.echo(visible(main_file(written)))


def _rounding_note(fidelity: Fidelity) -> str:
    """A difference above the tolerance in a reproduced replay is the log's own rounding: say so
    in the same line, never print what reads as a contradiction."""
    difference = fidelity.max_rel_loss_diff
    if not fidelity.reproduced or difference is None or difference <= fidelity.tolerance:
        return ""
    if fidelity.logged_decimals is None:
        return ""
    from tscope.render.formatting import format_number

    return (
        f", above the {format_number(fidelity.tolerance)} tolerance only by the log's rounding "
        f"to {fidelity.logged_decimals} decimals"
    )
