"""Hugging Face Trainer `trainer_state.json` (json.dumps(asdict(TrainerState)), sort_keys=True)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.base import read_head
from tscope.ingest.names import canonical_metric
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model import Caveat, LogRead, RunEvent

# Keys of log_history rows that are bookkeeping, not metrics.
_NON_METRIC_KEYS = {"step", "epoch"}
# The final row written by Trainer.train() summarizes the run; it is not a per-step measurement.
SUMMARY_ROW_MARKER = "train_runtime"
# Eval rows carry throughput numbers that are not training signals.
IGNORED_KEYS = {
    "eval_runtime",
    "eval_samples_per_second",
    "eval_steps_per_second",
    "total_flos",
    "num_input_tokens_seen",
}
_CONFIG_KEYS = (
    "logging_steps",
    "eval_steps",
    "save_steps",
    "max_steps",
    "num_train_epochs",
    "train_batch_size",
    "global_step",
)


class TrainerStateReader:
    name = "hf_trainer_state"
    # Every checkpoint-N/ holds a copy; the newest (largest global_step) wins.
    newest_only = True

    def can_read(self, path: Path) -> bool:
        return path.name.endswith("trainer_state.json") and b"log_history" in read_head(path, 65536)

    def read(self, path: Path, display_path: str) -> LogRead:
        try:
            state = json.loads(read_bytes_bounded(path, display_path).decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UnreadableInput(
                display_path,
                f"not valid JSON ({error})",
                "The file may be truncated; point tscope at an older checkpoint's copy",
            ) from error
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise UnreadableInput(display_path, "no log_history list in trainer_state.json")

        rows: list[tuple[int, str, float, str]] = []
        events: list[RunEvent] = []
        last_epoch_index: int | None = None
        for entry in history:
            if not isinstance(entry, dict) or SUMMARY_ROW_MARKER in entry:
                continue
            step = entry.get("step")
            if not isinstance(step, (int, float)) or isinstance(step, bool):
                continue
            step = int(step)
            for key, value in entry.items():
                if key in _NON_METRIC_KEYS or key in IGNORED_KEYS:
                    continue
                number = _as_float(value)
                if number is None:
                    continue
                rows.append((step, canonical_metric(key), number, key))
            epoch = entry.get("epoch")
            if isinstance(epoch, (int, float)) and not isinstance(epoch, bool):
                epoch_index = math.floor(epoch + 1e-9)
                if last_epoch_index is not None and epoch_index > last_epoch_index:
                    events.append(
                        RunEvent(
                            "epoch_boundary", step, f"epoch {epoch_index} begins", display_path
                        )
                    )
                last_epoch_index = epoch_index

        config = {key: state[key] for key in _CONFIG_KEYS if key in state}
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=LogRead.rows_to_table(rows, display_path),
            events=events,
            caveats=trainer_logging_caveats(_logging_steps(state), display_path),
            config=config,
            started_at=float(state.get("global_step", 0) or 0),
        )


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
