"""Open every checkpoint under a run directory and summarize it into CheckpointEvidence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import CheckpointHandle, LoadOptions
from tscope.ingest.safe_fs import is_file_refusal
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import CheckpointEvidence, CheckpointSnapshot


def read_checkpoints(
    root: Path,
    options: LoadOptions,
    progress: Callable[[str], None] | None = None,
) -> tuple[CheckpointEvidence | None, list[PartialInput]]:
    """Every checkpoint under root, opened lazily, statistics streamed one tensor at a time."""
    from tscope.ingest.checkpoints.registry import find_checkpoints

    handles: list[CheckpointHandle] = []
    partial: list[PartialInput] = []
    for reader, path, shown in find_checkpoints(root):
        try:
            handles.append(reader.open(path, shown, options))
        except UnreadableInput as error:
            partial.append(PartialInput(error.path, error.problem_text))
    if not handles:
        return None, partial
    handles.sort(key=lambda h: (h.info.step is None, h.info.step or 0, h.info.path))
    # Here, past `if not handles`: the statistics import pandas, which a logs-only run never needs.
    from tscope.ingest.checkpoints.stats.layers import collect_layers

    try:
        layers = collect_layers(handles, progress)
        snapshots = tuple(_snapshot(handle) for handle in handles)
    finally:
        for handle in handles:
            handle.close()
    for snapshot in snapshots:
        partial.extend(snapshot.partial)
    return CheckpointEvidence(snapshots=snapshots, layers=layers), partial


def _snapshot(handle: CheckpointHandle) -> CheckpointSnapshot:
    partial: list[PartialInput] = []
    optimizer_step: int | None = None
    groups: tuple[dict[str, Any], ...] = ()
    unmapped: tuple[str, ...] = ()
    entries: int | None = None
    try:
        state = handle.optimizer_state()
    except UnreadableInput as error:
        partial.append(PartialInput(error.path, error.problem_text))
        state = None
    if state is not None:
        steps = [float(v["step"]) for v in state.per_param.values() if v.get("step") is not None]
        if not steps and state.largest_step is not None:
            steps = [state.largest_step]  # entries that could not be named still count steps
        optimizer_step = int(max(steps)) if steps else None
        groups = tuple(
            {k: v for k, v in group.items() if isinstance(v, (int, float, str, bool, tuple, list))}
            for group in state.param_groups
        )
        unmapped = tuple(state.unmapped)
        entries = state.held_entries
        partial.extend(PartialInput(handle.info.path, problem) for problem in state.malformed)
    info = handle.info
    audit = handle.audit()
    # Read last: optimizer_state() and audit() add the files they refused to the handle.
    partial = [*handle.partial, *partial]
    return CheckpointSnapshot(
        info=CheckpointInfo(info.step, info.path, info.format, state is not None, info.has_rng),
        audit=audit,
        optimizer_step=optimizer_step,
        param_groups=groups,
        unmapped_optimizer_state=unmapped,
        optimizer_entries=entries,
        partial=_once_per_refusal(partial),
    )


SKIPPED = " (skipped)"  # what a later read of a file already refused adds


def _once_per_refusal(partial: list[PartialInput]) -> tuple[PartialInput, ...]:
    """Each entry once, and a file refused outright (a link, a FIFO) once, however many of the
    handle's reads met it: the first read says why, a later one repeats it with " (skipped)"."""
    kept: dict[tuple[str, str], PartialInput] = {}
    refused: set[str] = set()
    for entry in partial:
        if is_file_refusal(entry.problem):
            if entry.path in refused:
                continue
            refused.add(entry.path)
        kept.setdefault((entry.path, entry.problem.removesuffix(SKIPPED)), entry)
    return tuple(kept.values())
