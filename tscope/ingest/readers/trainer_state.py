"""Hugging Face Trainer `trainer_state.json` (json.dumps(asdict(TrainerState)), sort_keys=True)."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.base import read_head
from tscope.ingest.logs.names import canonical_metric
from tscope.model import Caveat, LogRead, PartialInput, RunEvent
from tscope.model.metric_rows import MetricRows
from tscope.model.run import EPOCH_AFTER_KEY, EPOCH_BEFORE_KEY, STEPS_AGAIN_KEY

# Real files are KB to tens of MB (the Trainer writes ~150 bytes per logged step, indent=2, so a
# run logging every one of 1M steps has ~150 MB). The whole document is parsed into Python
# objects, ~7x its bytes (1 KB-key rows: 52 MB held 360 MB): at 512 MiB a crafted file held
# 3.6 GB; 256 MiB bounds the parse near 1.8 GB.
MAX_TRAINER_STATE_BYTES = 256 * 1024 * 1024
# Keys of one log_history row that are read. The Trainer's rows hold 4-10 keys, an evaluation's a
# few dozen (several eval datasets); a row of 1,000 keys made 1,000 points per ~13 KB.
MAX_KEYS_PER_ENTRY = 256
# Steps are integers a float64 holds exactly (the long-form table is int64, charts are float).
MAX_STEP = 2**53

# Keys of log_history rows that are bookkeeping, not metrics.
_NON_METRIC_KEYS = {"step", "epoch"}
# Eval rows carry throughput numbers that are not training signals; with
# include_num_input_tokens_seen, every training row carries the session's runtime and token rate.
IGNORED_KEYS = {
    "eval_runtime",
    "eval_samples_per_second",
    "eval_steps_per_second",
    "total_flos",
    "num_input_tokens_seen",
    "train_runtime",
    "train_tokens_per_second",
}


# The Trainer logs `epoch` as global_step / steps per epoch (a float): it goes back only when the
# data position did, beyond float rounding.
EPOCH_REWIND_MIN = 1e-4
# A run resumes a handful of times; a file whose epoch goes back at every row is forged (each
# resume event is judged over the whole log: 100,000 of them would not finish).
MAX_REWINDS = 20


def _data_rewind(
    step: int, before: float, after: float, steps_again: float, display_path: str
) -> RunEvent:
    """A resume that restarted the data loader: the step counts on, the epoch goes back (the
    Trainer resumed with ignore_data_skip=True, or a sampler state that was not restored)."""
    return RunEvent(
        "resume",
        step,
        "seen in the logged epoch",
        display_path,
        numbers={
            EPOCH_BEFORE_KEY: before,
            EPOCH_AFTER_KEY: after,
            STEPS_AGAIN_KEY: steps_again,
        },
    )


def is_summary_row(keys: Collection[str]) -> bool:
    """The final row Trainer.train() writes summarizes the run (train_runtime, train_loss, …); it
    is no measurement at a step. Told by its shape: with include_num_input_tokens_seen every
    training row holds `train_runtime` too (and `loss`), and reading that key as the summary's
    mark dropped every training row of such a run."""
    return (
        "train_runtime" in keys
        and "loss" not in keys
        and not any(key.startswith("eval_") for key in keys)
    )


_CONFIG_KEYS = (
    "logging_steps",
    "eval_steps",
    "save_steps",
    "max_steps",
    "num_train_epochs",
    "train_batch_size",
    "global_step",
    # The value of metric_for_best_model at best_model_checkpoint: which eval series the run
    # selects its model on (the overfitting rule judges generalization on it when present).
    "best_metric",
)


class TrainerStateReader:
    name = "hf_trainer_state"
    # Every checkpoint-N/ holds a copy; the newest (largest global_step) wins.
    newest_only = True

    def can_read(self, path: Path) -> bool:
        return path.name.endswith("trainer_state.json") and b"log_history" in read_head(path, 65536)

    def read(self, path: Path, display_path: str) -> LogRead:
        try:
            # Through safe_fs (regular files only), bounded in size and nesting.
            state = safe_json.load_file(path, display_path, MAX_TRAINER_STATE_BYTES)
        except UnreadableInput as error:
            raise UnreadableInput(
                display_path,
                error.problem,
                "The file may be truncated or damaged; point tscope at an older checkpoint's copy",
            ) from error
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise UnreadableInput(display_path, "no log_history list in trainer_state.json")

        rows = MetricRows()
        names: dict[str, str] = {}  # key -> canonical name: every row repeats the same keys
        wide_entries = 0
        events: list[RunEvent] = []
        last_epoch_index: int | None = None
        last_epoch: float | None = None
        last_epoch_step = rewinds = 0
        bad_steps: list[Any] = []
        for entry in history:
            if rows.full:
                break
            if not isinstance(entry, dict) or is_summary_row(entry):
                continue
            step = _as_step(entry.get("step"))
            if step is None:
                bad_steps.append(entry.get("step"))
                continue
            keys_read = 0
            for key, value in entry.items():
                if key in _NON_METRIC_KEYS or key in IGNORED_KEYS:
                    continue
                number = _as_float(value)
                if number is None:
                    continue
                if keys_read == MAX_KEYS_PER_ENTRY:
                    wide_entries += 1
                    break
                keys_read += 1
                name = names.get(key)
                if name is None:
                    name = names[key] = canonical_metric(key)
                rows.add(step, name, number, key)
            epoch = entry.get("epoch")
            if (
                isinstance(epoch, (int, float))
                and not isinstance(epoch, bool)
                and math.isfinite(epoch)
            ):
                if last_epoch is not None and epoch < last_epoch - EPOCH_REWIND_MIN:
                    # The log's own steps per epoch: the steps fed since the epoch's value
                    # before, plus what it went back by, is the data fed twice.
                    rate = last_epoch_step / last_epoch if last_epoch > 0 else 0.0
                    again = (last_epoch - epoch) * rate + (step - last_epoch_step) if rate else 0.0
                    rewinds += 1
                    if rewinds <= MAX_REWINDS:
                        events.append(
                            _data_rewind(step, last_epoch, float(epoch), again, display_path)
                        )
                last_epoch, last_epoch_step = float(epoch), step
                epoch_index = math.floor(epoch + 1e-9)
                if last_epoch_index is not None and epoch_index > last_epoch_index:
                    events.append(
                        RunEvent(
                            "epoch_boundary", step, f"epoch {epoch_index} begins", display_path
                        )
                    )
                last_epoch_index = epoch_index

        # Plain scalars only: a crafted file may put anything here, and config is rendered.
        config = {
            key: state[key]
            for key in _CONFIG_KEYS
            if isinstance(state.get(key), (int, float, str, bool)) and _is_finite(state[key])
        }
        partial = []
        if bad_steps:
            partial.append(
                PartialInput(
                    display_path,
                    f"{len(bad_steps)} log_history row(s) without a usable step skipped (first "
                    f"step {_shown(bad_steps[0])}; a step must be an integer from 0 to 2**53). "
                    "The other rows are analyzed; a file edited or damaged by hand can cause this",
                )
            )
        if wide_entries:
            partial.append(
                PartialInput(
                    display_path,
                    f"{wide_entries} log_history row(s) hold more than {MAX_KEYS_PER_ENTRY} "
                    f"numeric keys: only their first {MAX_KEYS_PER_ENTRY} were read (the Trainer "
                    "logs a few dozen at most)",
                )
            )
        if rewinds > MAX_REWINDS:
            partial.append(
                PartialInput(
                    display_path,
                    f"the logged epoch goes back {rewinds} times: the first {MAX_REWINDS} are "
                    "judged as resumes, the rest left out (a run resumes a handful of times)",
                )
            )
        partial.extend(PartialInput(display_path, problem) for problem in rows.problems())
        global_step = _as_step(state.get("global_step"))
        caveats = trainer_logging_caveats(_logging_steps(state), display_path)
        del state, history  # the parsed document (~7x the file) is not needed past here
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            events=events,
            caveats=caveats,
            config=config,
            partial=partial,
            started_at=float(global_step or 0),
        )


def _as_step(value: Any) -> int | None:
    """A log_history step: an integer (or integral float) in [0, 2**53); None otherwise.

    NaN, inf (`1e400`), 2**63, text and lists are what damaged or crafted files hold here.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != math.floor(value)):
        return None
    return int(value) if 0 <= value < MAX_STEP else None


def _is_finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _shown(value: Any) -> str:
    """A short, printable form of a bad value for a message (the value may be huge)."""
    text = repr(value) if isinstance(value, (int, float, str, bool)) or value is None else None
    if text is None:
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _logging_steps(state: dict[str, Any]) -> int | None:
    value = state.get("logging_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def trainer_logging_caveats(logging_steps: int | None, source: str) -> list[Caveat]:
    """What the HF Trainer's logging hides: window averaging, last-step grad_norm, the NaN filter.

    Shared by every reader of Trainer output (trainer_state.json, its printed dicts).
    """
    caveats = []
    if logging_steps is not None and logging_steps > 1:
        caveats.append(
            Caveat(
                "logging_window",
                f"The Trainer logs the loss averaged over logging_steps={logging_steps} steps: a "
                f"one-step spike shows at most 1/{logging_steps} of its height, at the step that "
                "closes its window.",
                source,
            )
        )
        caveats.append(
            Caveat(
                "grad_norm_last_step",
                "The logged grad_norm is the pre-clip norm of the last step of each logging window "
                "only; spikes on the other steps are not visible.",
                source,
            )
        )
    caveats.append(
        Caveat(
            "nan_filter",
            "With the Trainer default logging_nan_inf_filter=True, a NaN/Inf step loss is replaced "
            "by the running mean before it is logged: non-finite losses can be hidden.",
            source,
        )
    )
    return caveats
