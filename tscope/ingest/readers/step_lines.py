"""Step lines: the `step N … loss: X … lr: Y` records most training loops print to stdout.

Beyond the producers with a reader of their own (Megatron, nanoGPT, the Trainer's dicts), almost
every loop prints one record per logged step as `key<separator>value` pairs after a step number:

    torchtitan   step:  1  loss: 10.8  grad_norm:  1.2  memory: …  tps: 1,234  mfu: 1.2%
    llm.c        step    1/100: train loss 10.8 norm 1.2 lr 6.0e-04 (12.3 ms, 1234 tok/s)
    own loops    step 1 | loss: 10.8 | lr 6.0e-04 | norm: 1.2 | dt: 123.4ms
    MaxText      completed step: 1, seconds: 1.2, …, loss: 10.8
    torchtune    Step 1 | loss:10.8 lr:6e-04 …
    litgpt       Epoch 1 | iter 8 step 1 | loss train: 10.8, val: n/a | iter time: 12.3 ms
    MMEngine     Iter(train) [  1/100]  base_lr: … lr: 6.0e-04 … grad_norm: 1.2  loss: 10.8
    fairseq      epoch 001:  10 / 100 loss=10.8, …, num_updates=10, lr=6e-04, gnorm=1.2, …
    DeepSpeed    steps: 10 loss: 10.8 iter time (s): 0.5 …   and   step=10, skipped=0, lr=[6e-04]
    Composer     [batch=1/100]:  then indented lines  Train loss/train/total: 10.8
    OLMo         [step=1/100]    then indented lines  train/CrossEntropyLoss=10.8

So this reader knows no producer: a record starts at a step key (`global_step`, `num_updates`,
`step`, `iteration`, `iter`, `batch`, MMEngine's `Iter(train) [`) followed by an integer, and
holds the `key: value`, `key=value` or `key value` pairs of its line and of the indented lines
right after it. A pair counts only when its name is one tscope knows (names.canonical_metric:
loss, eval loss, LR, grad norm, loss scale, skipped steps); throughput, memory and timings are
left out. A file is claimed only when several step lines carry a loss, and only after every
producer-specific reader declined it (registry order).
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

from tscope.ingest.logs.names import canonical_metric, names_a_known_series
from tscope.ingest.readers.text_logs import (
    is_text_log_name,
    iter_lines,
    no_records_error,
    sniff_text,
    strip_ansi,
    strip_launcher_prefix,
)
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LOSS
from tscope.model.metric_rows import MetricRows

# The step keys, strongest first: the optimizer-step count over a loop or micro-batch counter
# (litgpt prints `iter 8 step 1`: 8 micro-batches, 1 optimizer step; fairseq prints the
# iteration within the epoch and `num_updates`, the global count).
_STEP_KEYS = (
    ("global_step", 0),
    ("num_updates", 0),
    ("step", 1),
    ("steps", 1),
    ("iter(train)", 2),  # MMEngine's iteration-based loop
    ("iteration", 2),
    ("iter", 2),
    ("batch", 3),  # Composer's header counts batches trained
)
_STEP_PRIORITY = dict(_STEP_KEYS)
# A step key, its separator (`: `, `=`, a space, MMEngine's ` [`) and an integer, not the start of
# a decimal ("step 0.5" is no step) and not inside another word ("Skipping step", "substep").
_STEP = re.compile(
    r"(?<![\w/.\-])(?P<key>global[_ ]step|num_updates|steps?|iter\(train\)|iteration|iter|batch)"
    r"\s*(?:[:=#]\s*|\[\s*|\s+)(?P<step>\d{1,16})(?![\d.eE])(?:\s*/\s*(?P<total>\d{1,16}))?",
    re.IGNORECASE,
)
# A name of one to four words (`loss`, `train loss`, `Train loss/train/total`, `iter time (s)`)
# then `:`/`=` (an optional `[` for DeepSpeed's lr=[…]) or a space, then a number. The name is
# lazy, so `train loss 2.3` is tried as `train` first and extended only when no number follows.
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
_PAIR = re.compile(
    r"(?<![\w/.\-])(?P<key>[A-Za-z][\w/.\-()]{0,60}(?: [A-Za-z][\w/.\-()]{0,60}){0,3}?)"
    r"\s*(?:[:=]\s*[\[(]?\s*|\s+)(?P<value>" + _NUMBER + r")(?![\d.])",
    re.IGNORECASE,
)
# A pair on an indented line after a step line needs an explicit `:` or `=` (Composer, OLMo).
_INDENTED = re.compile(r"^[ \t]+\S")
# How many indented lines after a step line still belong to its record (OLMo prints ~40 metrics).
MAX_RECORD_LINES = 200
# Step lines carrying a loss that the sniffed head and tail must show before the file is claimed.
MIN_SNIFFED_RECORDS = 3
_LOSS_WORD = re.compile(r"loss", re.IGNORECASE)
# Names that mean a series only in a step line: llm.c and build-nanogpt print the gradient norm
# clip_grad_norm_ returned as a bare `norm`.
_STEP_LINE_NAMES = {"norm": GRAD_NORM}
# A record about evaluation: fairseq's `valid on 'valid' subset | loss 9.5 | …`, MaxText's
# `eval metrics after step: N, loss=…`, torchtitan's `validate step: N  loss: …`, Composer's
# `[Eval batch=…]`. Its plain `loss` is the evaluation loss. A word followed by `:`/`=` is a
# field's name (litgpt's `loss train: 2.3, val: n/a`), not the record's kind.
_EVAL_RECORD = re.compile(
    r"(?<![\w/.\-])(?:valid|validation|validate|val|eval|evaluation|evaluating)\b(?!\s*[:=])",
    re.IGNORECASE,
)


class StepLineLogReader:
    name = "step_lines"

    def can_read(self, path: Path) -> bool:
        if not is_text_log_name(path):
            return False
        text = sniff_text(path)
        if not text:
            return False
        records = 0
        in_record = 0  # indented lines left in a step record whose loss has not been seen
        for line in text.splitlines():
            line = strip_ansi(strip_launcher_prefix(line))[:4096]
            if _step_of(line) is not None:
                if _LOSS_WORD.search(line) and _has_loss(line):
                    records += 1
                    in_record = 0
                else:
                    in_record = MAX_RECORD_LINES
            elif in_record and _INDENTED.match(line):
                in_record -= 1
                if _LOSS_WORD.search(line) and _has_loss(line):
                    records += 1
                    in_record = 0
            else:
                in_record = 0
            if records >= MIN_SNIFFED_RECORDS:
                return True
        return False

    def read(self, path: Path, display_path: str) -> LogRead:
        rows = MetricRows()
        names: dict[str, str | None] = {}  # printed name -> canonical series (None: not one)
        step: int | None = None
        evaluating = False  # the current record is an evaluation's
        record_lines_left = 0
        printed_steps: list[int] = []
        for physical in iter_lines(path, display_path):
            if rows.full:
                break
            # A progress bar redrawn with "\r" leaves the last drawing as what the terminal showed.
            line = strip_ansi(strip_launcher_prefix(physical.rsplit("\r", 1)[-1]))
            found = _step_of(line)
            if found is not None:
                step, skip = found
                evaluating = _EVAL_RECORD.search(line) is not None
                if not evaluating:
                    printed_steps.append(step)
                record_lines_left = MAX_RECORD_LINES
                _add_pairs(line, skip, step, evaluating, rows, names, explicit_only=False)
            elif step is not None and record_lines_left and _INDENTED.match(line):
                record_lines_left -= 1
                _add_pairs(line, (0, 0), step, evaluating, rows, names, explicit_only=True)
            else:
                record_lines_left = 0
        if not rows.has_metric(LOSS):
            raise no_records_error(display_path, "step-line (`step N … loss: X`)")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            caveats=_caveats(printed_steps, display_path),
            config={},
            partial=[PartialInput(display_path, problem) for problem in rows.problems()],
        )


def _step_of(line: str) -> tuple[int, tuple[int, int]] | None:
    """(step, the span its text takes) of the strongest step key on the line, or None."""
    best: tuple[int, int, tuple[int, int]] | None = None
    for match in _STEP.finditer(line):
        priority = _STEP_PRIORITY[match["key"].lower().replace(" ", "_")]
        if best is None or priority < best[0]:
            best = (priority, int(match["step"]), match.span())
    return None if best is None else (best[1], best[2])


def _has_loss(line: str) -> bool:
    return any(
        _series_of(match["key"]) == LOSS
        for match in _PAIR.finditer(line)
        if _LOSS_WORD.search(match["key"])
    )


def _add_pairs(
    line: str,
    step_span: tuple[int, int],
    step: int,
    evaluating: bool,
    rows: MetricRows,
    names: dict[str, str | None],
    explicit_only: bool,
) -> None:
    for match in _PAIR.finditer(line):
        start, end = match.span()
        if start < step_span[1] and end > step_span[0]:
            continue  # the step key itself ("step 10", "batch=1/100")
        if explicit_only and not re.match(r"\s*[:=]", line[match.end("key") :]):
            continue
        key = match["key"]
        series = names.get(key, "")
        if series == "":
            series = names[key] = _series_of(key)
        if series == LOSS and evaluating and key.lower() == "loss":
            series = EVAL_LOSS  # an evaluation record's plain `loss`
        if series is not None:
            rows.add(step, series, float(match["value"]), key)


def _series_of(key: str) -> str | None:
    """The canonical series a printed name stands for, or None. Words before the name proper are
    dropped (`Train loss/train/total` is Composer's `loss/train/total`), and a name followed by
    its split reads as the split's (`loss train` as litgpt's training loss)."""
    words = key.split(" ")
    for first in range(len(words)):
        candidate = " ".join(words[first:])
        if candidate.lower() in _STEP_LINE_NAMES:
            return _STEP_LINE_NAMES[candidate.lower()]
        for spelling in (candidate, candidate.replace(" ", "/")):
            if names_a_known_series(spelling):
                return canonical_metric(spelling)
    return None


def _caveats(steps: list[int], source: str) -> list[Caveat]:
    caveats = [
        Caveat(
            "generic_step_lines",
            "Read as generic `step N … loss: X` lines: the log does not say whether the printed "
            "loss is one micro-batch's, one rank's, or a mean over the logging interval.",
            source,
        )
    ]
    if len(steps) >= 3:
        gaps = sorted(later - earlier for earlier, later in pairwise(steps))
        interval = gaps[len(gaps) // 2]
        if interval > 1:
            caveats.append(
                Caveat(
                    "sampled_iterations",
                    f"Only every {interval}th step is printed: a spike on the steps in between "
                    "is not visible.",
                    source,
                )
            )
    return caveats
