"""replay(run_dir, around=...) -> ReplayResult: pick the checkpoint, restore, replay, compare.

    from tscope.replay import replay
    result = replay("runs/exp1", around=145, window=(-5, 5), entry="replay_entry.py")
    print(result.fidelity.reproduced, result.fidelity.max_rel_loss_diff)

Nothing is written; the caller's RNG states and global torch settings are given back unchanged.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tscope import __version__
from tscope.errors import TscopeError, UnreadableInput, UsageError
from tscope.ingest.checkpoints.hub_guard import hub_code_refused
from tscope.model import Run
from tscope.model.replay import ReplayResult, RestoreReport
from tscope.model.visible_text import visible
from tscope.replay.determinism import replay_settings
from tscope.replay.diagnosis import ReplayConditions
from tscope.replay.entry import load_entry
from tscope.replay.fidelity import compare
from tscope.replay.files import CheckpointFiles
from tscope.replay.logs import logged_series
from tscope.replay.loop import ProgressCallback, run_steps
from tscope.replay.model_build import quiet_transformers
from tscope.replay.observers import Intervention, StepObserver
from tscope.replay.restore import restore
from tscope.replay.rng import caller_rng_preserved, max_dropout, rng_fingerprint
from tscope.replay.select import checkpoint_at_or_before, choose_checkpoint

if TYPE_CHECKING:
    import torch

# Steps before and after --around replayed when no window is given: enough context to see a
# spike rise and fall, short enough for a CPU replay of a small model in seconds.
DEFAULT_WINDOW = (-5, 5)
DEVICES = ("cpu", "cuda", "auto")


def replay(
    run_dir: str | Path,
    around: int,
    window: tuple[int, int] = DEFAULT_WINDOW,
    entry: str | Path | None = None,
    device: str = "cpu",
    deterministic: bool = True,
    on_step: ProgressCallback | None = None,
    observers: Sequence[StepObserver] = (),
    interventions: Sequence[Intervention] = (),
    run: Run | None = None,
    state_from: int | None = None,
    load_everything: bool = False,
) -> ReplayResult:
    """Replay the optimizer steps around `around` from the newest checkpoint before them.

    `window` = (-A, +B) asks for steps around-A .. around+B; the replay starts at the
    checkpoint, so it usually covers more. `run` is the run's normalized logs when the caller
    already has them (else they are read here, logs only). `state_from` restores the newest
    checkpoint at or before that step instead and feeds it the window's batches directly (the
    what-if "same batches, earlier state"; it cannot reproduce the log by design). Raises
    UsageError for inputs that cannot be replayed, with a one-line message naming the file and
    the fix. `load_everything` restores every state the checkpoint holds even where the
    producer's resume would drop some (the faithful resume that --check-resume compares with).
    """
    started = time.perf_counter()
    root = Path(run_dir)
    if not root.is_dir():
        raise UsageError(f"{root} is not a run directory. Pass the folder holding checkpoints.")
    if entry is None:
        raise UsageError(
            "Replay needs an entry file (--entry FILE.py) defining batches(start_step): the "
            "batches the run consumed, which no checkpoint stores."
        )
    first_wanted, last = around + window[0], around + window[1]
    if first_wanted > last or first_wanted < 0:
        raise UsageError(f"--window {window[0]}:{window[1]} around {around} is empty or negative.")
    loaded_entry = load_entry(entry)
    if run is None:
        from tscope.ingest.inputs import ReadOptions, read_inputs

        run = read_inputs([root], ReadOptions(read_weights=False)).run
    # The window must end near the run's own steps (its logs and checkpoints), or every step up
    # to `last` would be replayed.
    choice = (
        choose_checkpoint(root, first_wanted, last, run)
        if state_from is None
        else checkpoint_at_or_before(root, state_from)
    )
    first = choice.first_step if state_from is None else first_wanted
    # The learning rates of the state's own next steps (an LR anomaly in the window belongs to
    # the run's state and schedule, not to its batches).
    lr_offset = first - choice.first_step
    torch_device = resolve_device(device)
    files = CheckpointFiles(choice)
    try:
        producer = files.producer_version
        logs = logged_series(run, choice.facts, files.run_config)
        with (
            replay_settings(torch_device.type, relaxed=not deterministic) as settings_report,
            caller_rng_preserved(torch_device.type),
            hub_code_refused(),  # a stranger's config.json may ask transformers for Hub kernels
        ):
            restored = restore(
                files,
                loaded_entry,
                torch_device,
                logs,
                first - lr_offset,
                last - lr_offset,
                load_everything,
            )
            restored.settings.lr_step_offset = lr_offset
            restored.settings.observers = tuple(observers)
            for observer in observers:
                observer.bind(loaded_entry, restored.settings)
            restored.settings.interventions = tuple(interventions)
            rng_before = rng_fingerprint(torch_device.type)
            dropout = max_dropout(restored.model)
            stranger_built = (
                loaded_entry.build_model is None and choice.facts.model_from_config_json
            )
            try:
                with quiet_transformers():
                    steps, skipped = run_steps(
                        restored.model,
                        restored.optimizer,
                        loaded_entry,
                        first,
                        last,
                        restored.plan,
                        restored.settings,
                        on_step,
                    )
                rng_consumed = rng_fingerprint(torch_device.type) != rng_before
            except RuntimeError as error:
                if "deterministic" in str(error):
                    raise _nondeterministic_op(error) from error
                if stranger_built:
                    raise _config_model_failed(files, error) from error
                raise
            except (TscopeError, KeyboardInterrupt):
                raise
            except Exception as error:
                # A model built from a stranger's config.json failing in its forward pass (a
                # crafted setting transformers accepts at build time) is one line, not a
                # traceback; the entry file's own code failing keeps its traceback.
                if stranger_built:
                    raise _config_model_failed(files, error) from error
                raise
    finally:
        files.close()
        for observer in observers:  # a step that raised leaves hooks or wrappers installed
            close = getattr(observer, "close", None)
            if callable(close):
                close()
    installed = getattr(sys.modules.get("transformers"), "__version__", None)
    conditions = ReplayConditions(
        optimizer_restored=restored.optimizer_restored,
        rng_restored=restored.rng_restored,
        deterministic=deterministic,
        device_type=torch_device.type,
        producer_device=restored.producer_device,
        lr_source=restored.plan.source,
        producer_software=f"transformers {producer}" if producer else None,
        replay_software=f"transformers {installed}" if producer and installed else None,
        rng_consumed=rng_consumed,
        dropout=dropout,
    )
    comparisons, fidelity = compare(steps, logs, conditions)
    report = RestoreReport(
        optimizer=restored.optimizer_restored,
        scheduler=restored.scheduler_restored,
        rng=restored.rng_restored,
        scaler=restored.scaler_restored,
        lr_source=restored.plan.source,
        loss_path=restored.settings.loss_path,
        notes=tuple(settings_report.notes + restored.notes),
        caveats=tuple(settings_report.caveats + restored.caveats),
    )
    return ReplayResult(
        run_name=root.resolve().name,
        checkpoint_step=choice.step,
        checkpoint_path=choice.shown,
        checkpoint_format=choice.format,
        steps=(first, steps[-1].step if steps else first - 1),
        around=around,
        window=window,
        device=torch_device.type,
        deterministic=deterministic,
        restore=report,
        per_step=tuple(steps),
        comparisons=tuple(comparisons),
        fidelity=fidelity,
        skipped=tuple(skipped),
        seconds=time.perf_counter() - started,
        tool_version=__version__,
    )


def resolve_device(device: str) -> torch.device:
    """cpu, cuda, or auto (cuda when available)."""
    import torch

    if device not in DEVICES:
        raise UsageError(f"Unknown device {device!r}; valid devices: {', '.join(DEVICES)}.")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available here. Use --device cpu.")
    return torch.device(device)


def _nondeterministic_op(error: RuntimeError) -> UsageError:
    first = str(error).strip().splitlines()[0][:200]
    return UsageError(
        f"The model uses an operation without a deterministic kernel ({first}). Replay with "
        "deterministic settings relaxed (deterministic=False) to run it anyway."
    )


def _config_model_failed(files: CheckpointFiles, error: BaseException) -> UnreadableInput:
    text = str(error).strip()
    first_line = (text.splitlines()[0] if text else type(error).__name__)[:200]
    return UnreadableInput(
        f"{files.choice.shown}/config.json",
        f"the model it describes fails in its forward pass ({visible(first_line)})",
        "Define build_model(config) in the entry file, or replay the run's own checkpoint",
    )
