"""Megatron-LM / Megatron-DeepSpeed stdout: `iteration N/ M | key: value | ... |` records.

Megatron prints one record per log_interval from `training_log()` (megatron/training/training.py):
`iteration N/ M | consumed samples: ... | learning rate: 1.234E-04 | global batch size: ... |
lm loss: 2.77E+00 | loss scale: 4096.0 | grad norm: 1.23 | number of skipped iterations: 0 |
number of nan iterations: 0 |`, validation lines `validation loss at iteration N | lm loss value: X |
lm loss PPL: Y |`, and its flags between `---- arguments ----` and `---- end of arguments ----`.
Logs copied from a terminal have records wrapped at a fixed column, mid-word, and notes in between.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tscope.ingest.logs.names import canonical_metric
from tscope.ingest.readers.skip_counts import possible_skip_count, skip_events
from tscope.ingest.readers.text_logs import (
    iter_lines,
    no_records_error,
    parse_config_value,
    parse_int,
    parse_number,
    sniff_matches,
    strip_launcher_prefix,
)
from tscope.model import Caveat, LogRead, PartialInput, RunEvent
from tscope.model.metric_names import EVAL_LOSS, LOSS_SCALE, SKIPPED_STEPS
from tscope.model.metric_rows import MetricRows

_RECORD_START = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|")
# "valid loss at" is the BigScience fork's spelling; newer Megatron adds "on validation set".
_VALIDATION_START = re.compile(r"\b(?:validation|valid) loss at (?P<where>[^|]*)\|")
_ARGS_START = re.compile(r"^\s*-{3,}\s*arguments\s*-{3,}\s*$")
_ARGS_END = re.compile(r"^\s*-{3,}\s*end of arguments\s*-{3,}\s*$")
# `'  {name} {dots} {value}'` with the dots padding the name to a fixed width.
_ARG_LINE = re.compile(r"^\s+(?P<name>[A-Za-z_][\w\-]*) \.{2,}(?: (?P<value>.*))?$")
# The "at ..." part is bounded here: unbounded, each of the 4,700 "valid loss at " a crafted
# 64 kB head can hold scanned to the end of its line (quadratic). Real ones are ~40 characters.
_SNIFF = re.compile(
    r"iteration\s+\d+\s*/\s*\d+\s*\||(?:validation|valid) loss at [^|\n]{0,200}\|"
    r"|-{3,} arguments -{3,}"
)
# DeepSpeed's fp16 optimizers: "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:
# X, reducing to Y" (fp16/loss_scaler.py); ZeRO 1/2 print the same after "[deepscale]".
_OVERFLOW = re.compile(
    r"Skipping step\.?\s*Attempted loss scale:\s*(?P<before>[^\s,]+),\s*reducing to\s*"
    r"(?P<after>[^\s,]+)",
    re.IGNORECASE,
)
# A wrapped record goes on for a few lines at most (a 250-character record on an 80-column
# terminal); more than that is not a wrap.
MAX_CONTINUATION_LINES = 4
# A line that continues a record which happened to wrap right after a "|": "key: value |".
_FIELD_CONTINUATION = re.compile(r"^\s*[A-Za-z][^|:\[\]]{0,80}:\s*\S+\s*\|")

# Fields keyed by their name with all whitespace removed: a terminal wrap can split a name mid-word
# ("learning\n rate", "iteratio\nns") and joining the pieces may drop or keep the space.
# Value: (metric, the producer's spelling, factor to the metric's unit).
_FIELDS: dict[str, tuple[str, str, float]] = {
    "lmloss": (canonical_metric("lm loss"), "lm loss", 1.0),
    "learningrate": (canonical_metric("learning rate"), "learning rate", 1.0),
    "decoupledlearningrate": ("train/decoupled_learning_rate", "decoupled learning rate", 1.0),
    "lossscale": (canonical_metric("loss scale"), "loss scale", 1.0),
    "gradnorm": (canonical_metric("grad norm"), "grad norm", 1.0),
    "numberofskippediterations": (SKIPPED_STEPS, "number of skipped iterations", 1.0),
    "numberofnaniterations": ("train/nan_iterations", "number of nan iterations", 1.0),
    "numzeros": ("train/num_zeros", "num zeros", 1.0),
    "paramsnorm": ("train/params_norm", "params norm", 1.0),
    "globalbatchsize": ("train/global_batch_size", "global batch size", 1.0),
    "consumedsamples": ("train/consumed_samples", "consumed samples", 1.0),
    "consumedtokens": ("train/consumed_tokens", "consumed tokens", 1.0),
    "elapsedtimeperiteration(ms)": ("train/step_time_ms", "elapsed time per iteration (ms)", 1.0),
    "elapsedtimeperiteration(s)": ("train/step_time_ms", "elapsed time per iteration (s)", 1000.0),
    "samplespersecond": ("train/samples_per_second", "samples per second", 1.0),
    "tflops": ("train/tflops", "TFLOPs", 1.0),
    "throughputpergpu(tflop/s/gpu)": ("train/tflops", "throughput per GPU (TFLOP/s/GPU)", 1.0),
}
# Validation fields are "<loss name> value" and "<loss name> PPL"; the PPL is exp(value) and adds
# nothing, so only the values are kept.
_VALUE_SUFFIX = "value"
_MAIN_LOSS_KEYS = ("lmloss", "loss")


class MegatronLogReader:
    name = "megatron_log"

    def can_read(self, path: Path) -> bool:
        return sniff_matches(path, _SNIFF)

    def read(self, path: Path, display_path: str) -> LogRead:
        parser = _MegatronParser(display_path)
        parser.parse(_Lookahead(iter_lines(path, display_path)))
        return parser.result(self.name)


@dataclass
class _PendingOverflow:
    before: float
    after: float


@dataclass
class _MegatronParser:
    source: str
    rows: MetricRows = field(default_factory=MetricRows)
    events: list[RunEvent] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    partial: list[PartialInput] = field(default_factory=list)
    last_step: int | None = None
    step_gaps: Counter[int] = field(default_factory=Counter)
    overflows: list[_PendingOverflow] = field(default_factory=list)
    cut_records: int = 0
    records: int = 0
    # (iteration, skipped-iterations count) per record, and the loss scale per iteration: the
    # skip events are made once the whole log has shown whether the count is per logging window
    # (Megatron's) or a running total (skip_counts.skip_events).
    skip_counts: list[tuple[int, float]] = field(default_factory=list)
    scales: dict[int, float] = field(default_factory=dict)
    impossible_skip_counts: int = 0

    def parse(self, lines: _Lookahead) -> None:
        in_arguments = False
        for raw in lines:
            if self.rows.full:
                break
            line = strip_launcher_prefix(raw)
            if in_arguments:
                in_arguments = not _ARGS_END.match(line)
                argument = _ARG_LINE.match(line) if in_arguments else None
                if argument:
                    self.config[argument["name"]] = parse_config_value(argument["value"] or "")
                continue
            if _ARGS_START.match(line):
                in_arguments = True
                continue
            start = _RECORD_START.search(line) or _validation_start(line)
            if start is None:
                overflow = _OVERFLOW.search(line)
                if overflow:
                    self._note_overflow(overflow)
                continue
            text = _join_wrapped(line[start.start() :], lines)
            if start.re is _RECORD_START:
                self._take_iteration(text)
            else:
                self._take_validation(text)
        self._flush_overflows(None)

    def _take_iteration(self, text: str) -> None:
        head = _RECORD_START.match(text)
        if head is None:  # pragma: no cover - the caller matched at this position
            return
        step = parse_int(head["step"])
        if step is None:  # more digits than any iteration has: not an iteration record
            return
        total = parse_int(head["total"])
        if total is not None:
            self.config.setdefault("train_iters", total)
        self._flush_overflows(step)
        if self.last_step is not None and step > self.last_step:
            self.step_gaps[step - self.last_step] += 1
        self.last_step = step
        self.records += 1
        for raw_key, value in self._fields(text[head.end() :]):
            known = _iteration_field(raw_key)
            if known is None:
                continue
            metric, spelling, factor = known
            if metric == SKIPPED_STEPS and not possible_skip_count(value, step):
                self.impossible_skip_counts += 1
                continue
            self.rows.add(step, metric, value * factor, spelling)
            if metric == SKIPPED_STEPS:
                self.skip_counts.append((step, value))
            elif metric == LOSS_SCALE:
                self.scales[step] = value

    def _take_validation(self, text: str) -> None:
        head = _VALIDATION_START.match(text)
        if head is None:  # pragma: no cover - the caller matched at this position
            return
        where = head["where"]
        at = re.search(r"iteration\s+(\d+)", where)
        # "at the end of training for val data" carries no number: it follows the last iteration.
        if at and parse_int(at.group(1)) is None:  # more digits than any iteration has
            self.partial.append(
                PartialInput(self.source, "a validation line with an impossible iteration skipped")
            )
            return
        step = parse_int(at.group(1)) if at else self.last_step
        if step is None:
            self.partial.append(
                PartialInput(self.source, "a validation line before any iteration was skipped")
            )
            return
        split = "test" if "test" in where.lower() else "eval"
        self.records += 1
        for raw_key, value in self._fields(text[head.end() :]):
            key = _squash(raw_key)
            if not key.endswith(_VALUE_SUFFIX):
                continue
            base = " ".join(raw_key.split())[: -len(_VALUE_SUFFIX)].strip()
            if key[: -len(_VALUE_SUFFIX)] in _MAIN_LOSS_KEYS:
                metric = EVAL_LOSS if split == "eval" else "test/loss"
            else:
                metric = f"{split}/{base}"
            self.rows.add(step, metric, value, " ".join(raw_key.split()))

    def _fields(self, body: str) -> Iterator[tuple[str, float]]:
        """(name, value) of each `name: value |` field; an unterminated last field is cut off."""
        parts = body.split("|")
        if parts[-1].strip():
            self.cut_records += 1
        for part in parts[:-1]:
            raw_key, colon, raw_value = part.rpartition(":")
            if not colon:
                continue
            value = parse_number(raw_value)
            if value is not None and raw_key.strip():
                yield raw_key, value

    def _note_overflow(self, match: re.Match[str]) -> None:
        before, after = parse_number(match["before"]), parse_number(match["after"])
        if before is not None and after is not None:
            self.overflows.append(_PendingOverflow(before, after))

    def _flush_overflows(self, next_step: int | None) -> None:
        """Overflow messages print before the record of their iteration: tie them to that step.

        With log_interval > 1 the overflow happened somewhere in (last_step, next_step]; the
        record that closes the window is the step it is reported at. When no later record
        follows (end of file, or a restart rewinds the count) the best estimate is last_step + 1.
        """
        if not self.overflows:
            return
        pending, self.overflows = self.overflows, []
        if next_step is not None and (self.last_step is None or next_step > self.last_step):
            step = next_step
        elif self.last_step is not None:
            step = self.last_step + 1
        else:
            self.partial.append(
                PartialInput(
                    self.source,
                    f"{len(pending)} loss-scale overflow message(s) before any iteration line "
                    "were skipped: their step is unknown",
                )
            )
            return
        first, last = pending[0], pending[-1]
        self.events.append(
            RunEvent(
                "overflow",
                step,
                f"fp16 gradient overflow: {len(pending)} step(s) skipped, loss scale "
                f"{first.before:g} → {last.after:g}",
                self.source,
                {"from_scale": first.before, "to_scale": last.after, "overflows": len(pending)},
            )
        )

    def result(self, kind: str) -> LogRead:
        if self.records == 0 and not self.config:
            raise no_records_error(self.source, "Megatron")
        if self.records == 0:
            self.partial.append(
                PartialInput(self.source, "only the arguments block: no iteration was logged")
            )
        self.partial.extend(PartialInput(self.source, problem) for problem in self.rows.problems())
        if self.cut_records:
            self.partial.append(
                PartialInput(
                    self.source,
                    f"{self.cut_records} record(s) end without their closing '|' (cut off); "
                    "their last, possibly truncated field was ignored",
                )
            )
        if self.impossible_skip_counts:
            self.partial.append(
                PartialInput(
                    self.source,
                    f"{self.impossible_skip_counts} skipped-iteration count(s) that are not a "
                    "whole number from 0 to their iteration not read",
                )
            )
        self.events.extend(skip_events(self.skip_counts, self.scales, self.source))
        return LogRead(
            kind=kind,
            path=self.source,
            metrics=self.rows.to_table(self.source),
            events=self.events,
            caveats=self._caveats(),
            config=self.config,
            partial=self.partial,
        )

    def _caveats(self) -> list[Caveat]:
        interval = self.config.get("log_interval")
        if not isinstance(interval, int) and self.step_gaps:
            interval = self.step_gaps.most_common(1)[0][0]
        if not isinstance(interval, int) or interval <= 1:
            return []
        return [
            Caveat(
                "logging_window",
                f"Megatron prints the lm loss averaged over the log_interval={interval} "
                "iterations since the previous line, and the grad norm and loss scale of the last "
                f"of them only: a one-step loss spike shows at about 1/{interval} of its height.",
                self.source,
            )
        ]


class _Lookahead:
    """An iterator over lines that can look at the next line without consuming it."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._next: str | None = None

    def __iter__(self) -> _Lookahead:
        return self

    def __next__(self) -> str:
        if self._next is not None:
            line, self._next = self._next, None
            return line
        return next(self._lines)

    def peek(self) -> str | None:
        if self._next is None:
            self._next = next(self._lines, None)
        return self._next


def _join_wrapped(record: str, lines: _Lookahead) -> str:
    """The record with the lines a terminal wrapped it onto appended, exactly as split.

    A continuation carries no launcher prefix and no log-prefix "[", never starts a record, and
    contains a "|" (every wrapped piece still holds at least the closing "|"). When the record
    already ends in "|", only a line that starts with a `name: value |` field continues it.
    """
    for _ in range(MAX_CONTINUATION_LINES):
        following = lines.peek()
        if following is None or not following.strip() or following.lstrip().startswith("["):
            break
        if _RECORD_START.search(following) or _validation_start(following):
            break
        if record.rstrip().endswith("|"):
            if not _FIELD_CONTINUATION.match(following):
                break
        elif "|" not in following:
            break
        record = record.rstrip("\r") + following
        next(lines)
    return record


def _validation_start(line: str) -> re.Match[str] | None:
    """_VALIDATION_START searched only up to the line's last "|": a start after it cannot match,
    and searching there made each of a 1 MB line's 75,000 "valid loss at " scan to the end of
    the line (a crafted log hung `tscope analyze`). Before it, the first start matches."""
    return _VALIDATION_START.search(line, 0, line.rfind("|") + 1)


def _squash(name: str) -> str:
    return "".join(name.split()).lower()


@functools.lru_cache(maxsize=1024)
def _iteration_field(raw_key: str) -> tuple[str, str, float] | None:
    """(metric, spelling, factor) for a record's field name; None for fields not kept.

    Cached: a log repeats the same dozen names on every line.
    """
    key = _squash(raw_key)
    if key in _FIELDS:
        return _FIELDS[key]
    if "loss" in key:  # extra losses: "load_balancing_loss", "mtp_1 loss", "sop loss"
        spelling = " ".join(raw_key.split())
        return canonical_metric(spelling), spelling, 1.0
    return None
