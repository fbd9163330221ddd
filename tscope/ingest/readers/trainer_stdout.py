"""Hugging Face Trainer stdout: the log dicts it prints, `{'loss': 2.34, 'grad_norm': 1.2, ...}`.

ProgressCallback writes `str(logs)` through `tqdm.write` above the training bar; PrinterCallback
(`disable_tqdm=True`) prints it. transformers 5 prints floats as strings formatted `.4g`
(`{'loss': '3.252', 'epoch': '0.4'}`); older versions print Python floats (`nan`, `inf`) and numpy
2 scalars print as `np.float64(…)`. The dicts are parsed by a small scanner, never evaluated.

The rows carry no step. In order of preference the step comes from:
1. the training progress bar: tqdm redraws it right after each written row, so the first
   `N/M` of the training bar after a row is the global step the row was logged at;
2. epoch × steps per epoch, from the `***** Running training *****` banner (INFO logging);
3. the count of printed training rows, with a caveat that these are not optimizer steps.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tscope.ingest.logs.names import canonical_metric
from tscope.ingest.readers.progress_bars import ProgressBars
from tscope.ingest.readers.text_logs import (
    iter_lines,
    no_records_error,
    parse_int,
    parse_number,
    sniff_matches,
    strip_ansi,
)
from tscope.ingest.readers.trainer_state import (
    IGNORED_KEYS,
    is_summary_row,
    trainer_logging_caveats,
)
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_rows import MetricRows

# A printed row ends with the epoch (Trainer adds it last) or starts with a loss. The scan
# towards 'epoch' stops at the next "{'", where another start takes over: with `[^\n]*` each of
# the 10,000 "{'a': " a crafted 64 kB head can hold scanned to the end of its line (7 s a file).
_SNIFF = re.compile(
    r"\{'[^'\n]+': (?:[^\n{]|\{(?!'))*'epoch': |\{'(?:loss|eval_loss|train_runtime)': "
)
# tqdm's default bar: "{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]".
_PROGRESS = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")
_BANNER_START = "***** Running training *****"
# Banner lines (trainer.py `_inner_training_loop`), behind any logging prefix.
_BANNER_FIELDS = {
    "Num examples": "num_examples",
    "Num Epochs": "num_train_epochs",
    "Num update steps per epoch": "steps_per_epoch",
    "Instantaneous batch size per device": "per_device_train_batch_size",
    "Total train batch size (w. parallel, distributed & accumulation)": "total_train_batch_size",
    "Gradient Accumulation steps": "gradient_accumulation_steps",
    "Total optimization steps": "max_steps",
    "Number of trainable parameters": "num_trainable_parameters",
}
_BANNER_LINE = re.compile(
    "(?P<name>" + "|".join(re.escape(name) for name in _BANNER_FIELDS) + r") = (?P<value>[\d,]+)"
)
_NON_METRIC_KEYS = {"epoch", "step"}
_IGNORED_KEYS = IGNORED_KEYS
_EVAL_PREFIXES = ("eval_", "test_")
_ITEM = re.compile(
    r"\s*(?P<quote>['\"])(?P<key>[^'\"\\]+)(?P=quote)\s*:\s*(?P<value>.*)", re.DOTALL
)
_WRAPPED_SCALAR = re.compile(r"(?:np|numpy)\.\w+\((?P<inner>[^()]*)\)|tensor\((?P<tensor>[^,()]*)")
_OPENERS, _CLOSERS = "([{", ")]}"


# Printed metric dicts read from one log. The step of each is resolved only once all are read
# (from the bars after them), so each is held as an object (~0.7 KB); the Trainer prints one per
# logging_steps, and a million is every step of a million-step run.
MAX_PRINTED_ROWS = 1_000_000


@dataclass
class _PrintedRow:
    values: dict[str, float]
    is_eval: bool
    epoch: float | None
    # The total of the first bar drawn after the row; the bars' positions around each row are
    # in ProgressBars, not copied into every row.
    first_total_after: int | None = None


class TrainerStdoutReader:
    name = "hf_trainer_stdout"

    def can_read(self, path: Path) -> bool:
        return sniff_matches(path, _SNIFF)

    def read(self, path: Path, display_path: str) -> LogRead:
        rows: list[_PrintedRow] = []
        banner: dict[str, int] = {}
        bars = ProgressBars()
        in_banner = False
        for line in iter_lines(path, display_path):
            if len(rows) >= MAX_PRINTED_ROWS:
                break
            if _BANNER_START in line:
                in_banner = True
                continue
            if in_banner:
                setting = _BANNER_LINE.search(line)
                in_banner = setting is not None
                value = parse_int(setting["value"]) if setting else None
                if setting and value is not None:
                    banner[_BANNER_FIELDS[setting["name"]]] = value
                    continue
            for segment in line.split("\r"):  # tqdm redraws its bar after a carriage return
                _scan_segment(strip_ansi(segment), rows, bars)
        if not rows:
            raise no_records_error(display_path, "Hugging Face Trainer")
        steps, caveats = _resolve_steps(rows, banner, bars, display_path)
        points = MetricRows()
        names: dict[str, str] = {}  # key -> canonical name: a log repeats a few keys
        for row, step in zip(rows, steps, strict=True):
            for key, number in row.values.items():
                name = names.get(key)
                if name is None:
                    name = names[key] = canonical_metric(key)
                points.add(step, name, number, key)
        caveats.extend(_trainer_caveats(rows, steps, display_path))
        problems = points.problems() + bars.problems()
        if len(rows) >= MAX_PRINTED_ROWS:
            problems.append(
                f"only the first {MAX_PRINTED_ROWS:,} printed rows were read: tscope reads at "
                "most that many from one log (no training run prints more); the rest is left out"
            )
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=points.to_table(display_path),
            caveats=caveats,
            config=dict(banner),
            partial=[PartialInput(display_path, problem) for problem in problems],
        )


def _scan_segment(segment: str, rows: list[_PrintedRow], bars: ProgressBars) -> None:
    """Record the progress bars and the printed row of one redraw, in the order they appear.

    A row runs to the end of its segment (tqdm starts every redraw with "\\r"), so any bar in
    the segment comes before the row.
    """
    row_start = segment.find("{'")
    row_end = row_start if row_start >= 0 else len(segment)
    for bar in _PROGRESS.finditer(segment, 0, row_end):
        n, total = parse_int(bar["n"]), parse_int(bar["total"])
        if n is None or total is None:  # more digits than any bar counts to
            continue
        followed = bars.see(n, total, len(rows))  # False past the cap on distinct bars
        if followed and rows and rows[-1].first_total_after is None:
            rows[-1].first_total_after = total
    if row_start >= 0:
        row = _parse_printed_row(segment[row_start:])
        if row is not None:
            rows.append(row)


def _parse_printed_row(text: str) -> _PrintedRow | None:
    """A Trainer log row from `{'key': value, ...}`, or None if the text is anything else."""
    body = text.rstrip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    items = _split_top_level(body[1:-1])
    if items is None:
        return None
    values: dict[str, float] = {}
    keys: list[str] = []
    epoch: float | None = None
    for item in items:
        match = _ITEM.fullmatch(item)
        if match is None:
            return None
        key = match["key"]
        keys.append(key)
        number = _printed_number(match["value"].strip())
        if key == "epoch":
            epoch = number
        elif number is not None and key not in _NON_METRIC_KEYS and key not in _IGNORED_KEYS:
            values[key] = number
    is_trainer_row = "epoch" in keys or "loss" in keys or any(k.startswith("eval_") for k in keys)
    if not is_trainer_row or is_summary_row(keys) or not values:
        return None
    is_eval = any(key.startswith(_EVAL_PREFIXES) for key in keys)
    return _PrintedRow(values, is_eval, epoch)


def _split_top_level(inner: str) -> list[str] | None:
    """Split `a, b, c` at commas outside quotes and brackets; None if they do not balance."""
    items: list[str] = []
    depth, quote, start, escaped = 0, "", 0, False
    for index, char in enumerate(inner):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth < 0:
                return None
        elif char == "," and depth == 0:
            items.append(inner[start:index])
            start = index + 1
    if quote or depth:
        return None
    if inner[start:].strip():
        items.append(inner[start:])
    return items


def _printed_number(text: str) -> float | None:
    """The number in a printed value: `2.3`, `'2.3'`, `nan`, `np.float64(2.3)`, `tensor(2.3)`."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return parse_number(text[1:-1])
    wrapped = _WRAPPED_SCALAR.match(text)
    if wrapped:
        return parse_number(wrapped["inner"] if wrapped["inner"] is not None else wrapped["tensor"])
    return parse_number(text)


def _resolve_steps(
    rows: list[_PrintedRow], banner: dict[str, int], bars: ProgressBars, source: str
) -> tuple[list[int], list[Caveat]]:
    """The step of every printed row, and the caveats that say how it was found."""
    training_total = _training_bar_total(rows, banner, bars.moves)
    if training_total is not None:
        steps, caveats = _steps_from_bar(rows, training_total, banner, bars, source)
        # Rows printed in one late burst (stdout flushed at exit) all sit after the last bar:
        # they would collapse onto one step, so the bar cannot place them.
        if not _repeats_a_step(rows, steps):
            return steps, caveats
    steps_per_epoch = _banner_steps_per_epoch(banner)
    if steps_per_epoch is not None and all(row.epoch is not None for row in rows):
        steps = [round((row.epoch or 0.0) * steps_per_epoch) for row in rows]
        if not _repeats_a_step(rows, steps):
            return steps, [
                Caveat(
                    "steps_from_epoch",
                    "The printed rows carry no step: steps were computed as epoch × "
                    f"{steps_per_epoch:g} steps per epoch (from the Trainer's start-up banner) and "
                    "can be off by a few steps because the epoch is printed rounded.",
                    source,
                )
            ]
    return _row_index_steps(rows), [
        Caveat(
            "steps_are_row_indices",
            "The printed rows carry no step and the log has neither a progress bar nor the "
            "Trainer's start-up banner to recover it: steps here count the printed training rows "
            "(1, 2, 3, …), not optimizer steps; an eval row takes the count of the training row "
            "before it.",
            source,
        )
    ]


def _training_bar_total(
    rows: list[_PrintedRow], banner: dict[str, int], bar_moves: Counter[int]
) -> int | None:
    """The total of the training bar: the banner's max_steps, else the bar tqdm redraws after rows.

    Evaluation bars are closed before their row is printed, so the bar redrawn right after a row
    is the training bar; the evaluation bars can move more often, so movement alone is not enough.
    """
    max_steps = banner.get("max_steps")
    if max_steps is not None and max_steps in bar_moves:
        return max_steps
    redrawn = Counter(row.first_total_after for row in rows if row.first_total_after is not None)
    if redrawn:
        return max(redrawn, key=lambda total: (redrawn[total], total))
    if bar_moves:
        return max(bar_moves, key=lambda total: (bar_moves[total], total))
    return None


def _steps_from_bar(
    rows: list[_PrintedRow], total: int, banner: dict[str, int], bars: ProgressBars, source: str
) -> tuple[list[int], list[Caveat]]:
    exact = bars.first_after_rows(total)
    ratios = [
        exact[index] / row.epoch
        for index, row in enumerate(rows)
        if index in exact and row.epoch is not None and row.epoch > 0
    ]
    steps_per_epoch = _banner_steps_per_epoch(banner) or (
        statistics.median(ratios) if ratios else None
    )
    steps: list[int] = []
    estimated = 0
    for index, row in enumerate(rows):
        if index in exact:
            steps.append(exact[index])
            continue
        # Not redrawn after this row (stdout buffered, or the run ended): the step lies between
        # the last bar position shown before the row and the end of training.
        estimated += 1
        lower = bars.before_row(total, index) or 0
        guess = lower
        if steps_per_epoch is not None and row.epoch is not None:
            guess = round(row.epoch * steps_per_epoch)
        steps.append(min(max(guess, lower), total))
    caveats = []
    if estimated:
        caveats.append(
            Caveat(
                "steps_estimated",
                f"{estimated} of {len(rows)} printed rows had no progress-bar redraw after them; "
                "their steps were estimated from the epoch and the bar position before them.",
                source,
            )
        )
    return steps, caveats


def _repeats_a_step(rows: list[_PrintedRow], steps: list[int]) -> bool:
    """True when two consecutive training rows got the same step (they cannot share one)."""
    train_steps = [step for step, row in zip(steps, rows, strict=True) if not row.is_eval]
    return any(later == earlier for earlier, later in itertools.pairwise(train_steps))


def _banner_steps_per_epoch(banner: dict[str, int]) -> float | None:
    if banner.get("steps_per_epoch"):
        return float(banner["steps_per_epoch"])
    max_steps, epochs = banner.get("max_steps"), banner.get("num_train_epochs")
    if max_steps and epochs:
        return max_steps / epochs
    return None


def _row_index_steps(rows: list[_PrintedRow]) -> list[int]:
    steps = []
    training_rows = 0
    for row in rows:
        if not row.is_eval:
            training_rows += 1
        steps.append(training_rows)
    return steps


def _trainer_caveats(rows: list[_PrintedRow], steps: list[int], source: str) -> list[Caveat]:
    """The window is read off the printed rows: the most common gap between training steps."""
    train_steps = [step for step, row in zip(steps, rows, strict=True) if not row.is_eval]
    gaps = Counter(later - earlier for earlier, later in itertools.pairwise(train_steps))
    window = gaps.most_common(1)[0][0] if gaps else None
    return trainer_logging_caveats(window, source)
