"""Per-tensor statistics of every checkpoint, in one streaming pass: the layers table.

`collect_layers(handles)` reads the checkpoints in the order given (step order), one tensor at a
time, and returns one row per (checkpoint, tensor) with exactly the columns of
`tscope.model.checkpoint.LAYER_COLUMNS`. Memory: the current tensor, the same tensor of the
previous checkpoint while its delta is computed, and a few chunk buffers per worker thread
(tensor_stats.ChunkRunner); of earlier checkpoints only the previous handle and its small
per-tensor summaries (dtype, histogram) are kept. Unreadable tensors and optimizer files are
appended to that handle's `partial` list and skipped, never raised.

layers.parquet (written next to case.json by tscope.output_writer.write_layers_parquet)
--------------------------------------------------------------------------------------
One row per (checkpoint, tensor), checkpoints in step order, tensors sorted by name. Columns, in
this order (units and definitions as in LAYER_COLUMNS):

    step int64 (null when unknown) · checkpoint string · tensor string · dtype string (torch name:
    "float32", "bfloat16", …) · numel int64 · l2_norm, rms, mean, std (population), min, max,
    max_abs float64 over finite values · nonfinite_count int64 · zero_fraction float64 ·
    excess_kurtosis float64 · log_histogram list<int64> · exp_avg_norm, exp_avg_sq_norm, adam_step,
    eps_dominance, never_updated_share, update_rms, eps_dominated_max float64 (NaN without
    optimizer state) · delta_norm,
    update_ratio_per_step, norm_growth_rate, histogram_kl float64 (NaN for a checkpoint's first
    appearance of a tensor) · delta_source string (null there; else "fp32_master", "weights_fp32",
    "weights_bf16", "weights_fp16")

`log_histogram` has 67 counts of |x| over LOG_HISTOGRAM_EDGES (65 edges, ≈ 10**(k/4) for
k = -48 … 16, i.e. 1e-12 … 1e4, each rounded to bf16): bin 0 exact zeros, bin 1 below the first
edge, bins 2 … 65 the quarter-decade intervals [edge[i], edge[i+1]), bin 66 at or above the last
edge. NaN/Inf are in no bin. The exact edges are also stored in the file's schema metadata under
`tscope.log_histogram_edges` (a JSON list), with `tscope.layers_version` = "1".

Loading it elsewhere: `pandas.read_parquet("layers.parquet")` (log_histogram comes back as numpy
int64 arrays), `pyarrow.parquet.read_table`, or DuckDB `SELECT * FROM 'layers.parquet'`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import CheckpointHandle, OptimizerState
from tscope.ingest.checkpoints.stats.adam import AdamStats, adam_stats, parameter_group
from tscope.ingest.checkpoints.stats.chunk_runner import DEFAULT_WORKERS, ChunkRunner
from tscope.ingest.checkpoints.stats.tensor import LOG_HISTOGRAM_EDGES, TensorStats, tensor_stats
from tscope.ingest.checkpoints.stats.weight_deltas import (
    WeightDelta,
    delta_from_sums,
    delta_source_name,
    histogram_kl,
    weight_delta,
)
from tscope.model import PartialInput
from tscope.model.checkpoint import LAYER_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    import torch

    from tscope.ingest.checkpoints.safetensors_header import HeaderEntry

RawLocation = tuple[Path, "HeaderEntry"]

LAYERS_VERSION = "1"
# Tensors per checkpoint that get statistics. Dense LLMs hold a few hundred to ~1,000 tensors and
# large MoE checkpoints tens of thousands; each costs ~1-2 ms of fixed overhead however small, so
# a file listing 1,000,000 tiny tensors would take half an hour. Beyond the cap the first tensors
# in name order are kept and the checkpoint's `partial` says how many were left out.
MAX_TENSORS_PER_CHECKPOINT = 10_000
# Columns added after layers_version "1" (float, NaN when read from an older table).
ADDED_COLUMNS = ("never_updated_share", "eps_dominated_max")
_INT_COLUMNS = ("numel", "nonfinite_count")
_STRING_COLUMNS = ("checkpoint", "tensor", "dtype", "delta_source")
_FLOAT_COLUMNS = tuple(
    c for c in LAYER_COLUMNS if c not in (*_INT_COLUMNS, *_STRING_COLUMNS, "step", "log_histogram")
)


@dataclass
class _Previous:
    """What the next checkpoint needs of the one before: its handle and small summaries."""

    handle: CheckpointHandle
    step: int | None
    dtypes: dict[str, str] = field(default_factory=dict)
    histograms: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    master_weights: dict[str, Any] | None = None
    locations: dict[str, RawLocation] = field(default_factory=dict)  # safetensors-stored names


def collect_layers(
    handles: Sequence[CheckpointHandle],
    progress: Callable[[str], None] | None = None,
    *,
    chunk_elements: int | None = None,
    workers: int = DEFAULT_WORKERS,
) -> pd.DataFrame:
    """The layers table of these checkpoints (given in step order); see the module docstring.

    Deltas compare each checkpoint with the one before it in `handles` that could be listed.
    `progress` gets one line per tensor ("checkpoint-120: wte.weight (3/28)"). `workers` threads
    share the chunks of each tensor; `chunk_elements` overrides the kernels' chunk sizes (the
    results do not depend on it beyond float64 rounding). Problems go to `handle.partial`.
    """
    rows: list[dict[str, Any]] = []
    previous: _Previous | None = None
    with ChunkRunner(chunk_elements, workers) as runner:
        for handle in handles:
            try:
                names = handle.tensor_names()
            except UnreadableInput as error:
                _note(handle, error)
                continue
            if len(names) > MAX_TENSORS_PER_CHECKPOINT:
                handle.partial.append(
                    PartialInput(
                        handle.info.path,
                        f"holds {len(names)} tensors; statistics cover the first "
                        f"{MAX_TENSORS_PER_CHECKPOINT} by name (tscope's cap per checkpoint), "
                        f"{len(names) - MAX_TENSORS_PER_CHECKPOINT} are not analyzed",
                    )
                )
                names = names[:MAX_TENSORS_PER_CHECKPOINT]
            optimizer = _optimizer_state(handle)
            current = _Previous(
                handle,
                handle.info.step,
                master_weights=optimizer.master_weights if optimizer else None,
            )
            current.locations = _raw_locations(handle, names)
            scanned = _scan_raw(handle, current.locations, runner.workers, progress)
            for index, name in enumerate(names):
                if progress is not None and name not in scanned:
                    progress(f"{handle.info.path}: {name} ({index + 1}/{len(names)})")
                row = _tensor_row(
                    handle, name, optimizer, previous, runner, scanned.get(name), current
                )
                if row is not None:
                    rows.append(row)
                    current.dtypes[name] = row["dtype"]
                    current.histograms[name] = row["log_histogram"]
            previous = current
    return _layers_frame(rows)


def _raw_locations(handle: CheckpointHandle, names: list[str]) -> dict[str, RawLocation]:
    """Names whose bytes sit in a safetensors file (readers that say so: `raw_location`)."""
    locate = getattr(handle, "raw_location", None)
    if locate is None:
        return {}
    located = {name: locate(name) for name in names}
    return {name: where for name, where in located.items() if where is not None}


def _scan_raw(
    handle: CheckpointHandle,
    locations: dict[str, RawLocation],
    workers: int,
    progress: Callable[[str], None] | None,
) -> dict[str, TensorStats]:
    """Statistics of the safetensors-stored tensors without torch (safetensors_scan), by name."""
    from tscope.ingest.checkpoints.stats.safetensors_scan import SCANNED_DTYPES

    entries: dict[Path, dict[tuple[int, int], HeaderEntry]] = {}  # tied aliases: one entry
    for path, entry in locations.values():
        if entry.dtype in SCANNED_DTYPES:
            entries.setdefault(path, {})[(entry.start, entry.end)] = entry
    by_bytes: dict[tuple[Path, int, int], TensorStats] = {}
    for path, listed in entries.items():
        if progress is not None:
            progress(f"{handle.info.path}: {len(listed)} tensors of {path.name}")
        try:
            for entry, stats in _scan_file(path, handle.info.path, list(listed.values()), workers):
                by_bytes[(path, entry.start, entry.end)] = stats
        except UnreadableInput as error:
            _note(handle, error)
    scanned = {}
    for name, (path, entry) in locations.items():
        found = by_bytes.get((path, entry.start, entry.end))
        if found is not None:
            scanned[name] = found
    return scanned


def _scan_file(
    path: Path, shown: str, entries: list[HeaderEntry], workers: int
) -> list[tuple[HeaderEntry, TensorStats]]:
    from tscope.ingest.checkpoints.stats.safetensors_scan import scan_entries

    by_name = {entry.name: entry for entry in entries}
    return [(by_name[name], stats) for name, stats in scan_entries(path, shown, entries, workers)]


# What torch's CPU allocator says when it cannot (a RuntimeError, not a MemoryError).
_ALLOCATION_FAILED = ("can't allocate memory", "DefaultCPUAllocator", "not enough memory")


def _load(handle: CheckpointHandle, name: str) -> torch.Tensor:
    """handle.load_tensor, a tensor that does not fit in memory being one unreadable tensor:
    the readers bound what a file may make tscope allocate by what it holds, but a real tensor
    can still exceed this machine's memory (and torch then raises RuntimeError)."""
    try:
        return handle.load_tensor(name)
    except MemoryError as error:
        raise UnreadableInput(handle.info.path, f"tensor {name}: out of memory") from error
    except RuntimeError as error:
        if not any(mark in str(error) for mark in _ALLOCATION_FAILED):
            raise
        raise UnreadableInput(handle.info.path, f"tensor {name}: out of memory") from error


def _note(handle: CheckpointHandle, error: UnreadableInput) -> None:
    handle.partial.append(PartialInput(path=error.path, problem=f"{error.problem} (skipped)"))


def _optimizer_state(handle: CheckpointHandle) -> OptimizerState | None:
    try:
        return handle.optimizer_state()
    except UnreadableInput as error:
        _note(handle, error)
        return None


def _tensor_row(
    handle: CheckpointHandle,
    name: str,
    optimizer: OptimizerState | None,
    previous: _Previous | None,
    runner: ChunkRunner,
    scanned: TensorStats | None,
    current: _Previous,
) -> dict[str, Any] | None:
    """One layers row. Scanned statistics (safetensors bytes) need no tensor loaded; the
    optimizer's statistics and non-safetensors deltas load it through torch."""
    weights = None
    if scanned is None or optimizer is not None:
        try:
            weights = _load(handle, name)
        except UnreadableInput as error:
            _note(handle, error)
            return None
        if weights.is_complex():
            handle.partial.append(
                PartialInput(
                    f"{handle.info.path}:{name}", f"complex tensor ({weights.dtype}) skipped"
                )
            )
            return None
    stats = scanned
    if stats is None:
        assert weights is not None  # loaded above whenever nothing was scanned
        stats = tensor_stats(weights, runner)
    adam = AdamStats()
    if optimizer is not None:
        group = parameter_group(optimizer.param_groups, optimizer.group_of, name)
        adam = adam_stats(optimizer.per_param.get(name), group, runner)
    delta = WeightDelta()
    if previous is not None and name in previous.dtypes:
        delta = _delta(handle, name, weights, stats, optimizer, previous, runner, current)
    return {
        "step": handle.info.step,
        "checkpoint": handle.info.path,
        "tensor": name,
        **{key: getattr(stats, key) for key in TensorStats.__dataclass_fields__},
        **{key: getattr(adam, key) for key in AdamStats.__dataclass_fields__},
        **{key: getattr(delta, key) for key in WeightDelta.__dataclass_fields__},
    }


def _delta(
    handle: CheckpointHandle,
    name: str,
    weights: torch.Tensor | None,
    stats: TensorStats,
    optimizer: OptimizerState | None,
    previous: _Previous,
    runner: ChunkRunner,
    current_checkpoint: _Previous,
) -> WeightDelta:
    """W_t − W_prev from fp32 master weights when both checkpoints have them, else the weights
    (from the safetensors bytes when both are stored there, else loaded through torch)."""
    master_now = (optimizer.master_weights or {}).get(name) if optimizer else None
    master_before = (previous.master_weights or {}).get(name)
    steps = None
    if handle.info.step is not None and previous.step is not None:
        steps = handle.info.step - previous.step
    kl = histogram_kl(stats.log_histogram, previous.histograms[name])
    if master_now is not None and master_before is not None:
        moved = weight_delta(master_now, master_before, steps, "fp32_master", runner)
        return _with_kl(moved, kl)
    source = delta_source_name(stats.dtype, previous.dtypes[name], master=False)
    here, there = current_checkpoint.locations.get(name), previous.locations.get(name)
    if weights is None and here is not None and there is not None:
        if here[1].shape != there[1].shape:
            return WeightDelta(histogram_kl=kl, delta_source=source)
        from tscope.ingest.checkpoints.stats.safetensors_deltas import raw_delta_sums

        try:
            sums = raw_delta_sums(here, there, handle.info.path, runner.workers)
        except UnreadableInput as error:
            _note(handle, error)
            return WeightDelta()
        return _with_kl(delta_from_sums(*sums, steps, source), kl)
    try:
        current = weights if weights is not None else _load(handle, name)
        before = _load(previous.handle, name)
    except UnreadableInput as error:
        _note(previous.handle, error)
        return WeightDelta()
    return _with_kl(weight_delta(current, before, steps, source, runner), kl)


def _with_kl(moved: WeightDelta, kl: float) -> WeightDelta:
    return WeightDelta(
        moved.delta_norm,
        moved.update_ratio_per_step,
        moved.norm_growth_rate,
        kl,
        moved.delta_source,
    )


def _layers_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(LAYER_COLUMNS))
    frame["step"] = frame["step"].astype("Int64")
    for column in _INT_COLUMNS:
        frame[column] = frame[column].astype("int64")
    for column in _FLOAT_COLUMNS:
        frame[column] = frame[column].astype("float64")
    for column in _STRING_COLUMNS:  # object dtype, None when missing, in pandas 2 and 3 alike
        frame[column] = pd.Series(
            [None if _missing(v) else v for v in frame[column]], index=frame.index, dtype=object
        )
    frame["log_histogram"] = frame["log_histogram"].astype(object)
    return frame


def layers_schema() -> pa.Schema:
    """layers.parquet's arrow schema (tscope.output_writer writes the file)."""
    import pyarrow as pa

    types: dict[str, pa.DataType] = {"step": pa.int64(), "log_histogram": pa.list_(pa.int64())}
    types.update({c: pa.int64() for c in _INT_COLUMNS})
    types.update({c: pa.string() for c in _STRING_COLUMNS})
    types.update({c: pa.float64() for c in _FLOAT_COLUMNS})
    metadata = {
        "tscope.layers_version": LAYERS_VERSION,
        "tscope.log_histogram_edges": json.dumps(list(LOG_HISTOGRAM_EDGES)),
    }
    return pa.schema([pa.field(c, types[c]) for c in LAYER_COLUMNS], metadata=metadata)


def arrow_values(column: pd.Series, name: str) -> list[Any]:
    """Plain Python values of one column, None where missing (pyarrow makes them nulls)."""
    if name == "log_histogram":
        return [[int(v) for v in counts] for counts in column]
    if name in _FLOAT_COLUMNS:
        return [float(v) for v in column]  # NaN stays NaN: "not defined", not "missing"
    return [
        None if _missing(v) else (str(v) if name in _STRING_COLUMNS else int(v)) for v in column
    ]


def read_layers_parquet(path: Path) -> pd.DataFrame:
    """Load layers.parquet back into the frame collect_layers returns (same columns and dtypes)."""
    import pyarrow.parquet as pq

    shown = str(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as error:  # pyarrow raises ArrowInvalid (a ValueError) or OSError
        raise UnreadableInput(shown, f"not a readable parquet file ({error})") from error
    missing = [c for c in LAYER_COLUMNS if c not in table.column_names]
    if [c for c in missing if c not in ADDED_COLUMNS]:
        raise UnreadableInput(shown, f"not a tscope layers table: columns {missing} are missing")
    frame = table.select([c for c in LAYER_COLUMNS if c not in missing]).to_pandas()
    for column in missing:  # a table written before the column existed
        frame[column] = math.nan
    frame["log_histogram"] = [
        np.asarray(counts, dtype=np.int64) for counts in frame["log_histogram"]
    ]
    return _layers_frame(frame.to_dict("records"))


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
