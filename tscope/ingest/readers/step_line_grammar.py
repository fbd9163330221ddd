r"""What a step line is made of: its step key (or epoch position), its `name: value` pairs, its kind.

The grammar of readers/step_lines.py, kept apart from the reading loop. Every pattern is bounded
(names of at most four words of at most 61 characters, numbers of at most 16 digits in a step)
and no two adjacent parts can both take the same whitespace (`\s*` before an alternative that
starts with `\s+` made a name followed by 8,000 spaces cost 1.7 s, quadratic): a crafted line
costs regex work in proportion to its length (tests/test_reader_step_lines.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tscope.ingest.logs.names import canonical_metric, names_a_known_series
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LOSS, LOSS_SCALE

# The step keys, strongest first: the optimizer-step count over a loop or micro-batch counter
# (litgpt prints `iter 8 step 1`: 8 micro-batches, 1 optimizer step; fairseq prints the
# iteration within the epoch and `num_updates`, the global count).
STEP_KEY_PRIORITY = {
    "global_step": 0,
    "num_updates": 0,
    "valid_num_updates": 0,  # fairseq's --log-format json validation record
    "step": 1,
    "steps": 1,
    "iter(train)": 2,  # MMEngine's iteration-based loop: `Iter(train) [  1/300]`
    "iteration": 2,
    "iter": 2,
    "batch": 3,  # Composer's header counts batches trained: `[batch=1/100]:`
}
EPOCH_POSITION_PRIORITY = 1
# A step key, its separator (`: `, `=`, `#`, a space, MMEngine's ` [`) and an integer, not the
# start of a decimal ("step 0.5" is no step) and not inside another word ("Skipping step",
# "micro_step", "substep").
_STEP = re.compile(
    r"(?<![\w/.\-])(?P<key>global[_ ]step|(?:valid_)?num_updates|steps?|iter\(train\)|iteration|iter"
    r"|batch)"
    r"[\"']?(?:\s*[:=#]\s*[\"']?|\s*\[\s*|\s+)(?P<step>[1-9]\d{0,2}(?:,\d{3}){1,5}|\d{1,16})"
    r"(?![\d.eE])(?:\s*/\s*(?P<total>[1-9]\d{0,2}(?:,\d{3}){1,5}|\d{1,16}))?",
    re.IGNORECASE | re.ASCII,
)
# Loops that print a position within the epoch instead of a global step, with the epoch's length
# on the line, so that the global step is epoch × length + position:
#   MMEngine (by_epoch)  Epoch(train)  [2][ 100/500]    epoch 1-based, position 1-based
#   Composer (epochs)    [epoch=2][batch=100/500]:      epoch 1-based, position 1-based
#   timm                 Train: 1 [ 100/500 ( 20%)]     epoch 0-based, update 0-based
#   torchvision's references (MetricLogger)  Epoch: [1]  [ 100/500]  epoch 0-based, index 0-based
#   PyTorch examples' word_language_model    | epoch   2 |   200/ 2983 batches |  epoch 1-based
#   PyTorch examples' mnist (and the loops copied from it)  Train Epoch: 2 [640/60000 (1%)]
#                        epoch 1-based, position in samples 0-based: the axis counts samples
_EPOCH_POSITIONS = (
    (
        re.compile(
            r"Epoch\(train\)\s{0,8}\[(?P<epoch>\d{1,9})\]\[\s{0,16}(?P<at>\d{1,12})/(?P<of>\d{1,12})\]",
            re.ASCII,
        ),
        1,
    ),
    (
        re.compile(
            r"\[epoch=(?P<epoch>\d{1,9})\]\[batch=(?P<at>\d{1,12})/(?P<of>\d{1,12})\]", re.ASCII
        ),
        1,
    ),
    (
        re.compile(
            r"(?<![\w/.\-])Train:\s{0,8}(?P<epoch>\d{1,9})\s{0,8}\[\s{0,16}(?P<at>\d{1,12})/(?P<of>\d{1,12})\b",
            re.ASCII,
        ),
        0,
    ),
    (
        re.compile(
            r"Epoch: \[(?P<epoch>\d{1,9})\]\s{0,8}\[\s{0,16}(?P<at>\d{1,12})/(?P<of>\d{1,12})\]",
            re.ASCII,
        ),
        0,
    ),
    (
        re.compile(
            r"(?<![\w/.\-])(?:Train )?Epoch:?\s{1,8}(?P<epoch>\d{1,9})(?:\s{0,8}/\s{0,8}\d{1,9})?"
            r"\s{0,8}\[\s{0,16}(?P<at>\d{1,12})\s{0,8}/\s{0,8}(?P<of>\d{1,12})"
            r"(?:\s{1,8}\(\s{0,8}\d{1,3}(?:\.\d{1,3})?%\))?\]",
            re.ASCII | re.IGNORECASE,
        ),
        1,
    ),
    (
        re.compile(
            r"\| epoch\s{1,8}(?P<epoch>\d{1,9}) \|\s{0,16}(?P<at>\d{1,12})/\s{0,16}(?P<of>\d{1,12})"
            r" batches \|",
            re.ASCII,
        ),
        1,
    ),
)
# An epoch counter on a step line (`Epoch [2/5], Step [100/600]`, `Epoch 2 | Batch 100/938`,
# `epoch=2`): a step key that falls back when it rises counts within the epoch (readers/step_lines).
_EPOCH = re.compile(
    r"(?<![\w/.\-])epoch\s{0,8}[:=\[]?\s{0,8}(?P<epoch>\d{1,9})", re.IGNORECASE | re.ASCII
)
# One word of a name: a token starting with a letter (`loss`, `train/CE`, `lr-AdamW/group0`,
# `Iter(train)`), or a parenthesised group (OLMo-core's `optim/LR (group 0)`, DeepSpeed's
# `iter time (s)`).
_WORD = r"(?:[A-Za-z][\w/.\-]{0,60}|\([\w ./\-]{1,20}\))"
# A number: thousands separators (`grad_norm: 1,204.51`, `loss_scale: 65,536`) before the plain
# forms, then nanotron's human_format suffixes (`lm_loss: 2.34K`) captured apart; a sentence's
# closing `.` is not a decimal point (`loss: 2.3.`).
# No two parts can take the same digits (`\d+\.?\d*` split a run of n digits n ways: a
# 20,000-digit value took 16.8 s); a thousands group starts with a non-zero digit (`0,123` is no
# 123).
_NUMBER = (
    r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
)
_SUFFIX = r"(?P<suffix>(?-i:[KMBT])(?![A-Za-z]))?"
_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
# A name of one to four words, then `:` or `=` (an optional `[` or `(` for DeepSpeed's lr=[…], a
# `tensor(` for torchtune's grad_norm:tensor(0.81), quotes for a JSON record printed by a logger:
# fairseq's --log-format json), or spaces, then a number. The name is lazy:
# `train loss 2.3` is tried as `train` first and extended only when no number follows.
# A word of a name holds no parenthesis: with them, `(a(a(a…` cost a 60-character scan per
# letter; a name may start right after one (`step 5 (loss: 2.3, lr: 3e-4)`).
_PAIR = re.compile(
    r"(?<![\w/.\-])(?P<key>[A-Za-z][\w/.\-]{0,60}(?: " + _WORD + r"){0,3}?)"
    r"[\"']?(?:\s*[:=]\s*(?:(?:tensor\(|[\[(\"'])\s*)?|\s+)(?P<value>"
    + _NUMBER
    + r")"
    + _SUFFIX
    + r"(?!\d|\.\d)",
    re.IGNORECASE | re.ASCII,
)
EXPLICIT_SEPARATOR = re.compile(r"[\"']?\s*[:=]")
LOSS_WORD = re.compile(r"loss", re.IGNORECASE | re.ASCII)
# Names that mean a series only in a step line: llm.c and build-nanogpt print the gradient norm
# clip_grad_norm_ returned as a bare `norm`; an fp16 loop prints GradScaler's get_scale() as a
# bare `scale` (a fresh verification run, session 26: its collapse to 3e-42 went unread).
_STEP_LINE_NAMES = {"norm": GRAD_NORM, "scale": LOSS_SCALE}
# The words a name may carry in front of a known name: llm.c's `train loss`, Composer's `Train `
# and `Eval ` prefixes. No other word: `aux loss`, `z loss`, `avg loss`, `test loss`, `packet
# loss`, `min lr` and `param norm` are other quantities, not the training loss, LR or grad norm.
_SPLIT_WORDS = frozenset({"train", "training", "eval"})
# A record about evaluation: fairseq's `valid on 'valid' subset | loss 9.5 | …`, MaxText's
# `Completed eval after train step N, loss=…`, torchtitan's `validate step: N  loss: …`,
# Composer's `[Eval batch=…]`. Its plain `loss` is the evaluation loss. A word followed by `:`/`=`
# is a field's name (litgpt's `loss train: 2.3, val: n/a`), not the record's kind.
# Only where a record's kind is named: at the line's start, after a separator (`|`, `[`, `-`,
# `>`, a logger's `:`) or after MaxText's `Completed`; and not followed by a value (`val 3.2`,
# `val: n/a`, `val=3.2`: a field).
_EVAL_RECORD = re.compile(
    r"(?<![\w/.\-])(?:valid|validation|validate|val|eval|evaluation|evaluating)\b"
    r"(?!\s{0,8}[:=]?\s{0,8}(?:[-+]?[\d.]|n/a|nan|none|-))",
    re.IGNORECASE | re.ASCII,
)
# fairseq's end-of-epoch summary (`| train | epoch 001 | loss 8.92 | … | num_updates 1474`): the
# epoch's mean, logged at the step of the epoch's last update where the interval means are.
_EPOCH_SUMMARY = re.compile(r"\|\s?train\s?\|\s?epoch \d{1,9} \|", re.ASCII)
# fairseq's criterions divide the loss by ln 2 (bits); `train_inner` names its interval records.
_FAIRSEQ_RECORD = re.compile(r"\|\s?(?:train_inner|valid)\s?\|\s?(?:epoch \d{1,9}|\{)", re.ASCII)
BITS_TO_NATS = math.log(2)


@dataclass(frozen=True)
class StepKey:
    step: int
    priority: int  # STEP_KEY_PRIORITY's, lower is stronger
    span: tuple[int, int]  # where the key and its number sit on the line
    total: int | None  # the `/N` after the number (an epoch's length for a per-epoch counter)
    epoch: int | None  # an epoch counter on the same line
    # A weaker step key on the same line with another number: it counts something else
    # (litgpt's micro-batch `iter` beside its optimizer `step`).
    weaker_other_count: int | None


@dataclass(frozen=True)
class Pair:
    name: str  # as printed
    value: float
    span: tuple[int, int]
    explicit: bool  # `:` or `=` between the name and the number


def step_key(line: str) -> StepKey | None:
    """The line's step: an epoch position first (it is exact), else the strongest step key."""
    for pattern, first_epoch in _EPOCH_POSITIONS:
        if (position := pattern.search(line)) is not None:
            epoch, at, length = (int(position[name]) for name in ("epoch", "at", "of"))
            step = (epoch - first_epoch) * length + at
            return StepKey(step, EPOCH_POSITION_PRIORITY, position.span(), None, None, None)
    found = [
        (
            STEP_KEY_PRIORITY[match["key"].lower().replace(" ", "_")],
            int(match["step"].replace(",", "")),
            match,
        )
        for match in _STEP.finditer(line)
    ]
    if not found:
        return None
    priority, step, match = min(found, key=lambda item: item[0])
    others = [p for p, s, _ in found if p > priority and s != step]
    total = int(match["total"].replace(",", "")) if match["total"] is not None else None
    epoch_match = _EPOCH.search(line)
    return StepKey(
        step,
        priority,
        match.span(),
        total,
        int(epoch_match["epoch"]) if epoch_match is not None else None,
        min(others) if others else None,
    )


def pairs(line: str) -> list[Pair]:
    found = []
    for match in _PAIR.finditer(line):
        explicit = EXPLICIT_SEPARATOR.match(line, match.end("key")) is not None
        value = float(match["value"].replace(",", ""))
        if match["suffix"]:
            value *= _SUFFIXES[match["suffix"].upper()]
        found.append(Pair(match["key"], value, match.span(), explicit))
    return found


def is_evaluation(line: str, found: list[Pair]) -> bool:
    """Whether the record is an evaluation's: an eval word (not a field's name followed by its
    value) before the line's first value of a known series. A kind is named before the values
    (`INFO eval step 500 | loss 2.1`, fairseq's `| valid | epoch 001 | … | loss 7.5`); one after
    them is a field (`step 100 | loss 2.3 | val loss 2.5`, `| eval every 500 steps`). `found`:
    the line's pairs."""
    marker = _EVAL_RECORD.search(line)
    if marker is None:
        return False
    first_value = next(
        (pair.span[0] for pair in found if series_of(pair.name) is not None), len(line)
    )
    return marker.start() < first_value


# A settings dump printed before training (`config: lr=0.001 steps=3000 …`, `Namespace(…)`,
# `args: …`): its `steps=3000` is the run's length, not a step (healthy-run hunt, session 26:
# read as step 3000 before step 20, a resume).
_SETTINGS_DUMP = re.compile(
    r"(?:^|[\s\]|:])(?:config|configuration|args|arguments|hparams|hyper-?parameters|settings"
    r"|namespace|options)\s*[:(]",
    re.ASCII | re.IGNORECASE,
)


def is_settings_dump(line: str, key: StepKey) -> bool:
    """The step key follows a settings word (`config:`, `args:`, `Namespace(`) on its line."""
    return _SETTINGS_DUMP.search(line, 0, key.span[0]) is not None


def is_epoch_summary(line: str) -> bool:
    return _EPOCH_SUMMARY.search(line) is not None


def prints_bits(line: str) -> bool:
    """Whether the record is fairseq's, whose loss is printed in bits (base 2)."""
    return _FAIRSEQ_RECORD.search(line) is not None


def series_of(name: str) -> str | None:
    """The canonical series a printed name stands for, or None. Words before the name proper are
    dropped when they name a split (`Train loss/train/total` is Composer's `loss/train/total`),
    and a name followed by its split reads as the split's (`loss train` as litgpt's training
    loss)."""
    words = name.split(" ")
    for first in range(len(words)):
        if first and words[first - 1].lower() not in _SPLIT_WORDS:
            return None
        candidate = " ".join(words[first:])
        if candidate.lower() in _STEP_LINE_NAMES:
            return _STEP_LINE_NAMES[candidate.lower()]
        for spelling in (candidate, candidate.replace(" ", "/")):
            if names_a_known_series(spelling):
                return canonical_metric(spelling)
    return None


def evaluation_series(series: str, name: str) -> str:
    """An evaluation record's plain `loss` is the evaluation loss; other names keep theirs."""
    return EVAL_LOSS if series == LOSS and name.lower() == "loss" else series


def has_loss(line: str) -> bool:
    return any(series_of(pair.name) == LOSS for pair in pairs(line) if LOSS_WORD.search(pair.name))
