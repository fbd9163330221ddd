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
        snapshots: list[CheckpointSnapshot] = []
        embedding_found = False  # the vocabulary is the same in every checkpoint: read it once
        for handle in handles:
            snapshot = _snapshot(handle, with_embedding=not embedding_found)
            embedding_found = embedding_found or snapshot.token_embedding is not None
            snapshots.append(snapshot)
    finally:
        for handle in handles:
            handle.close()
    for snapshot in snapshots:
        partial.extend(snapshot.partial)
    return CheckpointEvidence(snapshots=tuple(snapshots), layers=layers), partial


def _snapshot(handle: CheckpointHandle, with_embedding: bool = True) -> CheckpointSnapshot:
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
    embedding = _token_embedding(handle) if with_embedding else None
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
        token_embedding=embedding,
    )


# The input embedding's name in the families real runs train (GPT-2 / nanoGPT `wte`, Llama /
# Mistral / OPT / Qwen `embed_tokens`, BLOOM / Megatron `word_embeddings`, GPT-NeoX `embed_in`,
# Meta's Llama `tok_embeddings`), then the output projection, whose weight is (vocab, hidden)
# too: nn.Linear stores (out_features, in_features).
TOKEN_EMBEDDING_NAMES = (
    "wte.weight",
    "embed_tokens.weight",
    "word_embeddings.weight",
    "embed_in.weight",
    "tok_embeddings.weight",
    "token_embedding.weight",
    "tok_emb.weight",
)
OUTPUT_PROJECTION_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight")


def _token_embedding(handle: CheckpointHandle) -> tuple[str, int] | None:
    """(name, rows) of the first tensor named like the token embedding (else the output
    projection) that is a matrix; read from the safetensors header where the reader has one."""
    try:
        names = handle.tensor_names()
    except UnreadableInput:
        return None
    for suffixes in (TOKEN_EMBEDDING_NAMES, OUTPUT_PROJECTION_NAMES):
        for name in names:
            if not any(name == s or name.endswith("." + s) for s in suffixes):
                continue
            shape = _shape(handle, name)
            if shape is not None and len(shape) == 2 and shape[0] >= 2:
                return name, int(shape[0])
    return None


def _shape(handle: CheckpointHandle, name: str) -> tuple[int, ...] | None:
    locate = getattr(handle, "raw_location", None)
    where = locate(name) if locate is not None else None
    if where is not None:
        return tuple(where[1].shape)
    try:
        return tuple(handle.load_tensor(name).shape)
    except UnreadableInput:
        return None


SKIPPED = " (skipped)"  # what a later read of a file already refused adds
# Entries shown per file; the rest are counted in one more. A crafted DCP .metadata made each of
# 1,000 (or 32,000) tensors fail on its own: as many warning lines and partial entries (red
# team round 8). The first ones say what is wrong; the count says how far it goes.
MAX_ENTRIES_PER_FILE = 20


def _once_per_refusal(partial: list[PartialInput]) -> tuple[PartialInput, ...]:
    """Each entry once, and a file refused outright (a link, a FIFO) once, however many of the
    handle's reads met it: the first read says why, a later one repeats it with " (skipped)".
    At most MAX_ENTRIES_PER_FILE per file, then one entry counting the others."""
    kept: dict[tuple[str, str], PartialInput] = {}
    refused: set[str] = set()
    for entry in partial:
        if is_file_refusal(entry.problem):
            if entry.path in refused:
                continue
            refused.add(entry.path)
        kept.setdefault((entry.path, entry.problem.removesuffix(SKIPPED)), entry)
    shown: list[PartialInput] = []
    per_file: dict[str, int] = {}
    for entry in kept.values():
        per_file[entry.path] = per_file.get(entry.path, 0) + 1
        if per_file[entry.path] <= MAX_ENTRIES_PER_FILE:
            shown.append(entry)
    for path, count in per_file.items():
        if count > MAX_ENTRIES_PER_FILE:
            more = count - MAX_ENTRIES_PER_FILE
            shown.append(
                PartialInput(
                    path,
                    f"{more} more problem(s) like those listed: parts of it cannot be read "
                    f"(the first {MAX_ENTRIES_PER_FILE} are listed)",
                )
            )
    return tuple(shown)
