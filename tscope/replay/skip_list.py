"""Turn bad samples into what a restart can skip: loader batches (skip_batches.json) or rows.

skip_batches.json has the format Lightning's SpikeDetection writes and a resumed run reads
(lightning.fabric.utilities.spike: `json.dump(bad_batches, f, indent=4)`, a list of int
`batch_idx`). Like SpikeDetection it lists, for every batch holding bad samples, that batch and
the one before it: the batch before may have moved the weights so that this one blew up.

Which `batch_idx` an optimizer step is. The entry file's `batch_index(step) -> int` when it
defines one: the batch_idx the training loop sees for the step's batch (its first micro-batch
under gradient accumulation; micro-batch j is batch_index(step) + j). Otherwise the convention of
a single-epoch run with steps counted from 1: micro-batch j of step s is (s − 1) · A + j, A the
micro-batches per step. Its limits: Lightning resets batch_idx at every epoch start, so from the
second epoch on it is wrong (define batch_index from steps_per_epoch); a loop that counts its
batch_idx per optimizer step, not per micro-batch, wants batch_index(step) = step − 1.

`skip_samples` is the finer suggestion, {step: [rows]} with rows counted over the step's
micro-batches concatenated, for loaders that can drop single rows. Both go to the case directory
(--out), never into the run directory: tscope writes nothing under its inputs.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tscope.errors import UsageError
from tscope.model.replay import BadSample
from tscope.output_files import prepare_folder, write_text

SKIP_BATCHES_FILE = "skip_batches.json"
SINGLE_EPOCH = "single_epoch"  # (step − 1) · micro-batches per step + micro-batch
ENTRY_BATCH_INDEX = "entry_batch_index"  # the entry file's batch_index(step)


@dataclass(frozen=True)
class SkipSuggestion:
    batches: tuple[int, ...]  # loader batch_idx values, ascending: skip_batches.json
    samples: dict[int, tuple[int, ...]]  # {step: rows within the step's batch}
    convention: str  # SINGLE_EPOCH or ENTRY_BATCH_INDEX

    def to_dict(self) -> dict[str, object]:
        return {
            "file": SKIP_BATCHES_FILE,
            "batches": list(self.batches),
            "samples": {str(step): list(rows) for step, rows in sorted(self.samples.items())},
            "convention": self.convention,
        }


def suggest_skips(
    bad: Sequence[BadSample],
    micro_batch_rows: Mapping[int, Sequence[int]],
    batch_index: Callable[[int], int] | None = None,
) -> SkipSuggestion:
    """Batches and rows to skip for `bad`; `micro_batch_rows[step]` lists the rows of each of the
    step's micro-batches (one entry without gradient accumulation)."""
    samples: dict[int, set[int]] = {}
    batches: set[int] = set()
    for sample in bad:
        samples.setdefault(sample.step, set()).add(sample.index)
        rows = micro_batch_rows.get(sample.step)
        if not rows:
            raise ValueError(f"no micro-batch sizes for step {sample.step}")
        micro = _micro_batch_of(sample.index, rows)
        first = _first_batch(sample.step, len(rows), batch_index)
        # The bad micro-batch and the one before it, as SpikeDetection._handle_spike does.
        batches.update(b for b in (first + micro - 1, first + micro) if b >= 0)
    return SkipSuggestion(
        batches=tuple(sorted(batches)),
        samples={step: tuple(sorted(rows)) for step, rows in sorted(samples.items())},
        convention=ENTRY_BATCH_INDEX if batch_index is not None else SINGLE_EPOCH,
    )


def write_skip_batches(
    out_dir: str | Path, suggestion: SkipSuggestion, run_dir: str | Path | None = None
) -> Path:
    """Write out_dir/skip_batches.json as SpikeDetection does; refuses a path inside run_dir."""
    out = Path(out_dir)
    if run_dir is not None:
        root = Path(run_dir).resolve()
        resolved = out.resolve()
        if resolved == root or root in resolved.parents:
            raise UsageError(
                f"{out} is inside the run directory {run_dir}; tscope never writes into an "
                f"input. Write {SKIP_BATCHES_FILE} to the case directory (--out) instead."
            )
    prepare_folder(out, "the skip list")
    return write_text(out / SKIP_BATCHES_FILE, json.dumps(list(suggestion.batches), indent=4))


def _first_batch(step: int, micro_batches: int, batch_index: Callable[[int], int] | None) -> int:
    if batch_index is None:
        return (step - 1) * micro_batches
    value = batch_index(step)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(
            f"the entry file's batch_index({step}) returned {value!r}; it must return the int "
            "batch_idx the training loop saw for that optimizer step's batch."
        )
    return int(value)


def _micro_batch_of(index: int, rows: Sequence[int]) -> int:
    end = 0
    for micro, count in enumerate(rows):
        end += count
        if index < end:
            return micro
    raise ValueError(f"row {index} is beyond the {end} rows of its step")
