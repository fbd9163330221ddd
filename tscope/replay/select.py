"""Which checkpoint a replay starts from: the newest one whose state precedes the window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tscope.errors import UsageError
from tscope.ingest.checkpoints.base import LoadOptions, ReplayFacts
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.ingest.checkpoints.state_dict_files import step_from_name
from tscope.model import Run

# How far past the run's last logged or checkpointed step a replay may reach: the default window
# ends 5 steps after --around, and a log written every few steps stops before the last update.
# Beyond that there is nothing to compare with, and `--around 2**63` replayed (and looped) forever.
STEPS_PAST_RUN_END = 50


@dataclass(frozen=True)
class CheckpointChoice:
    path: Path
    shown: str  # relative to the run directory
    format: str  # its reader's name
    step: int  # the step number the producer gave the checkpoint
    first_step: int  # the first optimizer step a replay from it runs
    facts: ReplayFacts  # what the replay must know of its producer (its reader's)


def first_replay_step(facts: ReplayFacts, step: int) -> int:
    """The step whose update comes right after the checkpoint's state.

    Trainer `checkpoint-N/` is saved after update N (global_step counts finished updates), so the
    next is N+1. nanoGPT saves `iter_num` N at the top of iteration N, before update N. Lightning's
    `step=N.ckpt` holds global_step N (N updates done) and its loggers number a batch by the
    updates before it (the loss logged at step N is the batch of update N+1), so in the log's
    numbering the next step is N, as for nanoGPT. Each reader says which (next_update_offset).
    """
    return step + facts.next_update_offset


def replayable_checkpoints(run_dir: Path) -> list[CheckpointChoice]:
    """Every checkpoint under run_dir a replay can start from, in step order."""
    choices = []
    for reader, path, shown in find_checkpoints(run_dir):
        facts = reader.replay_facts
        if facts is None or facts.sharded:  # the layouts one process restores
            continue
        step = step_from_name(path.name)
        if step is None:  # e.g. nanoGPT's plain ckpt.pt: its iter_num says
            handle = reader.open(path, shown, LoadOptions())
            try:
                step = handle.info.step
            finally:
                handle.close()
        if step is None:
            continue
        choices.append(
            CheckpointChoice(path, shown, reader.name, step, first_replay_step(facts, step), facts)
        )
    return sorted(choices, key=lambda c: (c.step, c.shown))


def choose_checkpoint(
    run_dir: Path,
    window_start: int,
    window_end: int | None = None,
    run: Run | None = None,
    available: list[CheckpointChoice] | None = None,
) -> CheckpointChoice:
    """The newest checkpoint from which step `window_start` can be replayed; with `window_end`,
    refused when that step lies past the run's end (check_window_end). `available`: the run's
    replayable_checkpoints when the caller has them (finding a nanoGPT ckpt.pt's step opens it)."""
    if available is None:
        available = replayable_checkpoints(run_dir)
    if not available:
        raise UsageError(
            f"No replayable checkpoint in {run_dir}: replay needs Hugging Face Trainer "
            "checkpoint-N/ folders, nanoGPT ckpt*.pt files or Lightning .ckpt files "
            "(an FSDP2 run saved with torch DCP replays sharded: add --nproc N)."
        )
    if window_end is not None:
        check_window_end(run_dir, window_end, available, run)
    usable = [c for c in available if c.first_step <= window_start]
    if not usable:
        steps = ", ".join(str(c.step) for c in available)
        earliest = min(c.first_step for c in available)
        raise UsageError(
            f"No checkpoint in {run_dir} precedes step {window_start} (checkpoints at steps "
            f"{steps}). Choose --around and --window so the window starts at step {earliest} "
            "or later."
        )
    return max(usable, key=lambda c: (c.step, c.shown))


def checkpoint_at_or_before(
    run_dir: Path, step: int, available: list[CheckpointChoice] | None = None
) -> CheckpointChoice:
    """The newest checkpoint saved at or before `step` (what-if "from=STEP"); `available` as
    for choose_checkpoint."""
    if available is None:
        available = replayable_checkpoints(run_dir)
    usable = [c for c in available if c.step <= step]
    if not usable:
        steps = ", ".join(str(c.step) for c in available) or "none"
        raise UsageError(
            f"--what-if from={step}: no checkpoint in {run_dir} was saved at or before step "
            f"{step} (checkpoints at steps {steps})."
        )
    return max(usable, key=lambda c: (c.step, c.shown))


def check_window_end(
    run_dir: Path, window_end: int, checkpoints: list[CheckpointChoice], run: Run | None
) -> None:
    """Refuse a window ending more than STEPS_PAST_RUN_END steps after the last step the run
    logged or checkpointed: the replay would run every step up to it (one line, the last step)."""
    # The last step whose update a checkpoint holds, in the log's numbering (first_replay_step):
    # a Trainer checkpoint-120 ends the run at step 120, not 121.
    known = [c.first_step - 1 for c in checkpoints]
    last_logged = run.last_step if run is not None else None
    if last_logged is not None:
        known.append(last_logged)
    if not known:
        return
    last = max(known)
    if window_end > last + STEPS_PAST_RUN_END:
        raise UsageError(
            f"Step {window_end} is past the end of {run_dir}: its last logged or checkpointed "
            f"step is {last}. Choose --around and --window so the window ends by step "
            f"{last + STEPS_PAST_RUN_END}."
        )


def window_after_checkpoint(
    available: list[CheckpointChoice], around: int, window: tuple[int, int]
) -> tuple[tuple[int, int], str | None]:
    """`window`, started later when no checkpoint precedes its start but one precedes `around`
    (with the note saying so), else unchanged. A replay starts from a saved state and cannot
    replay the steps before it; a Trainer's `save_steps` often leave a checkpoint one to four
    steps before a spike, where the default window (5 steps before) was refused."""
    start = around + window[0]
    if not available or any(c.first_step <= start for c in available):
        return window, None
    before = [c for c in available if c.first_step <= around]
    if not before:
        return window, None  # choose_checkpoint refuses it and says what to choose
    newest = max(before, key=lambda c: (c.step, c.shown))
    note = (
        f"The window starts at step {newest.first_step}, the first step after {newest.shown}: "
        f"no checkpoint precedes step {start}, where the default window would start."
    )
    return (newest.first_step - around, window[1]), note


def check_earlier_state(
    run_dir: Path, available: list[CheckpointChoice], from_step: int, baseline: CheckpointChoice
) -> None:
    """Refuse a what-if "from=STEP" that restores the checkpoint the replay itself starts from:
    the same state fed the same batches says nothing about data against state."""
    state = checkpoint_at_or_before(run_dir, from_step, available)
    if state.path != baseline.path:
        return
    earlier = [c for c in available if c.step < baseline.step]
    hint = (
        f"Pick a step before {baseline.step} (checkpoints at steps "
        f"{', '.join(str(c.step) for c in earlier)})."
        if earlier
        else "The run has no checkpoint before it, so this what-if cannot be run here "
        "(--what-if skip and lr=… can)."
    )
    raise UsageError(
        f"--what-if from={from_step} restores {state.shown}, the checkpoint the replay itself "
        f"starts from: the same state fed the same batches cannot tell the data from the state. "
        + hint
    )


def checked_window(
    run_dir: Path,
    around: int,
    window: tuple[int, int],
    run: Run | None,
    from_steps: Sequence[int],
    fit: bool,
) -> tuple[tuple[int, int], str | None]:
    """The window a replay around `around` runs, and its note: with `fit`, the default window
    started after a checkpoint just before it (window_after_checkpoint). Checked before anything
    is replayed: a checkpoint it can start from (choose_checkpoint), and no what-if "from" at
    `from_steps` restoring that same checkpoint (check_earlier_state). The checkpoints are listed
    once (a nanoGPT ckpt.pt is opened to find its step)."""
    available = replayable_checkpoints(run_dir)
    note = None
    if fit:
        window, note = window_after_checkpoint(available, around, window)
    start = choose_checkpoint(run_dir, around + window[0], around + window[1], run, available)
    for step in from_steps:
        check_earlier_state(run_dir, available, step, start)
    return window, note
