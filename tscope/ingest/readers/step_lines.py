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
`step`, `iteration`, `iter`, `batch`, MMEngine's `Iter(train) [`) followed by an integer, or at
an epoch position whose epoch length is on the line (step_line_grammar.py), and holds the
`key: value`, `key=value` or `key value` pairs of its line and of the indented lines right after
it. A pair counts only when its name is one tscope knows (names.canonical_metric:
loss, eval loss, LR, grad norm, loss scale, skipped steps); throughput, memory and timings are
left out. A file is claimed only when several step lines carry a loss, and only after every
producer-specific reader declined it (registry order).
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from tscope.ingest.readers import step_line_grammar as grammar
from tscope.ingest.readers.text_logs import (
    is_text_log_name,
    iter_lines,
    no_records_error,
    sniff_text,
    split_launcher_prefix,
    strip_ansi,
    strip_launcher_prefix,
)
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_names import EVAL_LOSS, LOSS
from tscope.model.metric_rows import MetricRows

# A pair on an indented line after a step line (Composer, OLMo) needs an explicit `:` or `=`.
_INDENT = (" ", "\t")
# How many indented lines after a step line still belong to its record (OLMo prints ~40 metrics).
MAX_RECORD_LINES = 200
# Step lines carrying a loss that the sniffed head and tail must show before the file is claimed.
MIN_SNIFFED_RECORDS = 3
# Bounds on what a log can make the reader hold besides its points: the printed names looked up
# (a crafted 56 MB log of 400,000 names held 418 MB), the steps kept to find the logging interval.
MAX_NAMES_CACHED = 10_000
MAX_STEPS_KEPT_FOR_INTERVAL = 100_000
# A step key this weak (an epoch's batch counter) in an evaluation record counts the evaluation
# loader's batches, not training steps.
BATCH_PRIORITY = grammar.STEP_KEY_PRIORITY["batch"]
# The longest line the sniffing looks at (a step line is a few hundred characters).
SNIFF_LINE_CHARACTERS = 4096


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
            line = strip_ansi(strip_launcher_prefix(line))[:SNIFF_LINE_CHARACTERS]
            if grammar.step_key(line) is not None:
                in_record = MAX_RECORD_LINES
            elif not (in_record and line.startswith(_INDENT)):
                in_record = 0
                continue
            in_record -= 1
            if grammar.LOSS_WORD.search(line) and grammar.has_loss(line):
                records += 1
                in_record = 0
                if records >= MIN_SNIFFED_RECORDS:
                    return True
        return False

    def read(self, path: Path, display_path: str) -> LogRead:
        record = _Record()
        ranks_seen: set[int] = set()
        for physical in iter_lines(path, display_path):
            if record.rows.full:
                break
            # A progress bar redraws itself after "\r": each drawing is a segment of its own, and a
            # step line printed between two drawings is one of them.
            for segment in physical.split("\r"):
                prefixed_rank, text = split_launcher_prefix(segment)
                # Lines without a launcher prefix are a single process's, or rank 0's before a
                # restart under torchrun (which then prefixes them): one stream with rank 0.
                rank = 0 if prefixed_rank is None else prefixed_rank
                line = strip_ansi(text)
                key = grammar.step_key(line)
                if key is not None:
                    ranks_seen.add(rank)
                    if _rank_order(rank) < _rank_order(record.rank):
                        record = _Record(rank)  # a lower rank's lines: read those instead
                    if rank == record.rank or record.rank == _NO_RANK_YET:
                        record.rank = rank
                        record.start(line, key)
                # Continuation lines carry no launcher prefix (only a record's first line does).
                elif prefixed_rank in (None, record.rank) and record.continues(line):
                    record.add_pairs(grammar.pairs(line), None, explicit_only=True)
                elif rank == record.rank:
                    record.lines_left = 0
        if not record.rows.has_metric(LOSS):
            raise no_records_error(display_path, "step-line (`step N … loss: X`)")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=record.rows.to_table(display_path),
            caveats=_caveats(record, len(ranks_seen), display_path),
            config={},
            partial=[PartialInput(display_path, problem) for problem in record.rows.problems()],
        )


_NO_RANK_YET = -1


def _rank_order(rank: int) -> tuple[int, int]:
    """The lowest rank first; before any, no rank yet."""
    return (1, 0) if rank == _NO_RANK_YET else (0, rank)


class _Record:
    """The step record being read, of the one rank whose lines are kept, and what it gave."""

    def __init__(self, rank: int = _NO_RANK_YET) -> None:
        self.rank = rank
        self.rows = MetricRows()
        self.names: dict[str, str | None] = {}  # printed name -> canonical series or None
        self.step: int | None = None
        self.lines_left = 0
        self.evaluating = False  # the record is an evaluation's
        self.in_bits = False  # fairseq's: its losses are in bits
        self.seen: set[str] = set()  # the series this record gave already (the first one counts)
        self.printed_steps: list[int] = []
        self.last_train_step: int | None = None
        # A step key found counting something other than the steps (litgpt's micro-batch `iter`
        # beside its `step`): records keyed by it alone are on another axis and are skipped.
        self.other_count_priority: int | None = None
        self.producers: set[str] = set()
        self.epoch_counter = _EpochCounter()

    def start(self, line: str, key: grammar.StepKey) -> None:
        if key.weaker_other_count is not None:
            self.other_count_priority = key.weaker_other_count
        on_another_axis = (
            self.other_count_priority is not None and key.priority >= self.other_count_priority
        )
        if on_another_axis or grammar.is_epoch_summary(line) or grammar.is_settings_dump(line, key):
            self.step, self.lines_left = None, 0
            return
        found = grammar.pairs(line)
        self.evaluating = grammar.is_evaluation(line, found)
        # An evaluation's own counter (`Epoch 3 | Validation | Batch 20`) does not move the
        # training counter's epochs; an evaluation keyed by its loader's batch alone (Composer's
        # `[Eval batch=10/10] Eval on eval data:`) belongs to the training step before it (it
        # was filed at step 10, every evaluation on one step).
        if self.evaluating and key.priority >= BATCH_PRIORITY and self.last_train_step is not None:
            self.step = self.last_train_step
        else:
            self.step = self.epoch_counter.global_step(key, learn=not self.evaluating)
        if not self.evaluating:
            self.last_train_step = self.step
        self.in_bits = grammar.prints_bits(line)
        self.producers.update(name for name, sign in _PRODUCER_SIGNS if sign in line)
        self.seen = set()
        if not self.evaluating and len(self.printed_steps) < MAX_STEPS_KEPT_FOR_INTERVAL:
            self.printed_steps.append(self.step)
        self.add_pairs(found, key.span, explicit_only=False)
        # Indented lines continue a header that carries no loss of its own (Composer's
        # `[batch=N/M]:`, OLMo's `[step=N/M]`, a `Step s | lr …` header); after a line with its
        # loss, an indented block is something else (a config dump).
        self.lines_left = 0 if self.seen & {LOSS, EVAL_LOSS} else MAX_RECORD_LINES

    def continues(self, line: str) -> bool:
        """Whether the line is an indented line of the current record (Composer, OLMo)."""
        if self.step is None or not self.lines_left or not line.startswith(_INDENT):
            return False
        self.lines_left -= 1
        return True

    def add_pairs(
        self, found: list[grammar.Pair], step_span: tuple[int, int] | None, explicit_only: bool
    ) -> None:
        assert self.step is not None
        for pair in found:
            if step_span and pair.span[0] < step_span[1] and pair.span[1] > step_span[0]:
                continue  # the step key itself ("step 10", "batch=1/100")
            if explicit_only and not pair.explicit:
                continue
            series = self.names.get(pair.name, "")
            if series == "":
                series = grammar.series_of(pair.name)
                if len(self.names) < MAX_NAMES_CACHED:  # a crafted log prints endless names
                    self.names[pair.name] = series
            if series is None:
                continue
            if self.evaluating:
                series = grammar.evaluation_series(series, pair.name)
            if series in self.seen:
                continue  # MaxText's `loss` then `lm_loss`: the record's first spelling counts
            self.seen.add(series)
            value = pair.value
            if self.in_bits and series in (LOSS, EVAL_LOSS):
                value *= grammar.BITS_TO_NATS
            self.rows.add(self.step, series, value, pair.name)


class _EpochCounter:
    """The global step of a counter that restarts every epoch (`Epoch [2/5], Step [100/600]`,
    `Epoch 2 | Batch 100/938`): found when the counter falls back as the epoch number rises; from
    then on the step is (epoch − first epoch) × the epoch's length + the count, the length being
    the printed total (`/600`) or, without one, the last count before each fall. A counter that
    never falls back is already global and is left as printed, as is every global key."""

    def __init__(self) -> None:
        self.first_epoch: int | None = None
        self.last: tuple[int, int] | None = None  # (epoch, count) of the previous record
        self.epoch_first_count: int | None = None  # the first count of the previous record's epoch
        self.offsets: dict[int, int] = {}  # epoch -> steps before it, once a restart was seen
        self.restarts = False

    def global_step(self, key: grammar.StepKey, learn: bool = True) -> int:
        """The global step of `key`; `learn` False: an evaluation record, mapped with what the
        training records showed but not taken as one of them."""
        if key.epoch is None or key.priority == 0:
            return key.step
        if learn:
            self._see(key)
        if not self.restarts:
            return key.step
        if key.total is not None:
            return (key.epoch - (self.first_epoch or 0)) * key.total + key.step
        return self.offsets.get(key.epoch, 0) + key.step

    def _see(self, key: grammar.StepKey) -> None:
        assert key.epoch is not None
        if self.first_epoch is None:
            self.first_epoch = key.epoch
        previous, self.last = self.last, (key.epoch, key.step)
        if previous is None or key.epoch != previous[0]:
            first_before, self.epoch_first_count = self.epoch_first_count, key.step
        else:
            return
        # A restart: the next epoch's counter starts again near where the previous epoch's
        # started (a resume's step falls back too, but not to the start of an epoch).
        if (
            previous is not None
            and key.epoch == previous[0] + 1
            and first_before is not None
            and key.step < previous[1]
            and key.step <= first_before + (previous[1] - first_before) // 10
        ):
            self.restarts = True
            if key.total is None:
                self.offsets[key.epoch] = self.offsets.get(previous[0], 0) + previous[1]


# Producers whose printed numbers need a word in the report, by a mark their lines carry.
_PRODUCER_SIGNS = (
    ("mmengine", "Iter(train)"),
    ("mmengine", "Epoch(train)"),
    ("fairseq", "train_inner"),
    ("pytorch_examples", "Train Epoch:"),
)
_PRODUCER_CAVEATS = {
    "mmengine": (
        "mmengine_window_mean",
        "MMEngine's LogProcessor prints the loss and grad_norm as means over its window "
        "(window_size, 10 iterations by default): a one-step spike is diluted.",
    ),
    "pytorch_examples": (
        "epoch_sample_position",
        "The log prints each record's position within its epoch in samples (PyTorch's mnist "
        "example: `Train Epoch: 2 [640/60000 (1%)]`): the step axis here counts samples seen, "
        "(epoch − 1) × the epoch's size + the position, not optimizer steps.",
    ),
    "fairseq": (
        "fairseq_interval_mean",
        "fairseq prints each loss in bits (base 2), converted here to nats, averaged over the "
        "log interval (--log-interval): a one-step spike is diluted.",
    ),
}


def _caveats(record: _Record, ranks: int, source: str) -> list[Caveat]:
    caveats = [
        Caveat(
            "generic_step_lines",
            "Read as generic `step N … loss: X` lines: the log does not say whether the printed "
            "loss is one micro-batch's, one rank's, or a mean over the logging interval.",
            source,
        )
    ]
    caveats += [Caveat(*_PRODUCER_CAVEATS[name], source) for name in sorted(record.producers)]
    steps = record.printed_steps
    if len(steps) >= 3:
        gaps = sorted(later - earlier for earlier, later in pairwise(steps))
        interval = gaps[len(gaps) // 2]
        if interval > 1 and "pytorch_examples" not in record.producers:  # there: samples
            caveats.append(
                Caveat(
                    "sampled_iterations",
                    f"Only every {interval}th step is printed: a spike on the steps in between "
                    "is not visible.",
                    source,
                )
            )
    if ranks > 1:
        caveats.append(
            Caveat(
                "single_rank_loss",
                f"{ranks} ranks print step lines into this log; the lines of rank {record.rank} "
                "are read: its loss is one rank's, not the mean over ranks.",
                source,
            )
        )
    return caveats
