"""What a TensorBoard tag means to tscope: a per-step metric (under its canonical name), the run's
configuration (text summaries and hparams), or neither. The file's framing and decoding stay in
readers/tensorboard.py."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.logs.names import canonical_metric, canonical_metrics
from tscope.ingest.logs.table_columns import unique_metric_names
from tscope.ingest.readers.event_proto import decode_hparams
from tscope.ingest.readers.protobuf_wire import WireFormatError
from tscope.ingest.settings_bound import BoundedSettings, cut_name
from tscope.model import Caveat, LogRead, MetricTable, TextColumn
from tscope.model.metric_names import EVAL_LOSS, LEARNING_RATE, LOSS, LOSS_SCALE

# torch's SummaryWriter.add_text appends this to the tag (torch/utils/tensorboard/summary.py).
_TEXT_TAG_SUFFIX = "/text_summary"
# Text summaries that hold the run's configuration, and the key prefix their fields get: the HF
# Trainer's TensorBoardCallback writes TrainingArguments as "args" and the model's config as
# "model_config", both as JSON (transformers integration_utils.TensorBoardCallback.on_train_begin).
_CONFIG_TEXT_TAGS = {"args": "", "model_config": "model_config."}
# Nested configuration deeper than this stays one value instead of more dotted keys.
_MAX_CONFIG_DEPTH = 6
# Megatron logs each series a second time against consumed samples or tokens instead of the
# iteration ("lm loss vs samples", "steps-vs-tokens/..."). Those points have no optimizer-step
# axis, so they are left out rather than mixed into step-indexed series.
_NON_STEP_AXIS_SUFFIXES = (" vs samples", " vs tokens", " vs gigaflos")
_NON_STEP_AXIS_GROUPS = ("steps-vs-samples/", "steps-vs-tokens/")
# The HF Trainer's end-of-training summary goes through the same callback as "train/<key>" at the
# last step ("train/train_loss" is the whole run's mean loss, not that step's), and eval throughput
# rides along with every eval: none of them is a per-step training signal (trainer_state.py skips
# the same keys).
_HF_NON_SIGNAL_TAGS = frozenset(
    {
        "train/train_loss",
        "train/train_runtime",
        "train/train_samples_per_second",
        "train/train_steps_per_second",
        "train/total_flos",
        "eval/runtime",
        "eval/samples_per_second",
        "eval/steps_per_second",
    }
)


# Writers that put the split in the event file's directory instead of the tag: fairseq's
# TensorBoard progress bar opens one SummaryWriter per split under its log dir (`train_inner/`
# every log interval, `train/` at each epoch's end, `valid/` and any other --valid-subset such as
# `valid1/` or `test/`; fairseq/logging/progress_bar.py TensorboardProgressBarWrapper._writer,
# fairseq_cli/train.py), Keras' TensorBoard callback `train/` and `validation/`
# (keras/src/callbacks/tensorboard.py). Their tags are bare (`loss`, `epoch_loss`): a training
# directory's loss is the loss, the first evaluation split's the eval loss, and any other bare tag
# is named after its directory so that the splits' series (`ppl`, `epoch_accuracy`, a second
# subset's `loss`) stay apart instead of interleaving into one. Only when a sibling directory is
# a split too: a lone run folder that happens to be called `test` or `eval` keeps its tags.
_TRAIN_DIRECTORIES = ("train", "train_inner", "training")
_EVAL_DIRECTORIES = ("valid", "validation", "val", "eval")
_SPLIT_DIRECTORY = re.compile(
    r"^(train|train_inner|training|valid|validation|val|eval|evaluation|test|dev)(?:[_-]?\d+)?$"
)
# fairseq's `train/` beside a `train_inner/` holds the epoch means of the interval series.
_FAIRSEQ_INTERVAL_DIRECTORY = "train_inner"


def metric_name(tag: str) -> str | None:
    """The canonical metric for a tag, or None for series that are not per-step signals."""
    if tag in _HF_NON_SIGNAL_TAGS:
        return None
    if tag.endswith(_NON_STEP_AXIS_SUFFIXES) or tag.startswith(_NON_STEP_AXIS_GROUPS):
        return None
    return _tag_metric(tag)


def _tag_metric(tag: str) -> str:
    if tag in DEEPSPEED_SAMPLES_SERIES:
        return DEEPSPEED_SAMPLES_SERIES[tag]
    return canonical_metric(tag)  # Megatron-DeepSpeed's "<group>/<series>" tags included


def metric_names(tags: list[str], path: Path, display_path: str) -> list[str | None]:
    """The metric name of each tag of one event file at `path` (None: not a per-step signal);
    `display_path` is the file's path inside the input (how far up the input reaches).

    No two tags share a name: when several map to one canonical metric, the spelling
    `metric_preference` ranks best takes it and the others keep their tags.
    """
    kept = [tag for tag in tags if metric_name(tag) is not None]
    names = canonical_metrics(kept, mapper=_tag_metric)
    if _is_split_directory(path, display_path):
        names = [
            _split_directory_name(tag, name, path) if "/" not in tag else name
            for tag, name in zip(kept, names, strict=True)
        ]
    unique = dict(unique_metric_names(list(zip(kept, names, strict=True)), duplicate="tag"))
    return [unique.get(tag) for tag in tags]


def _is_split_directory(path: Path, display_path: str) -> bool:
    """Whether the file's folder is one split beside another, both inside the input: the folder
    the input itself names (or one holding a file named alone) has its siblings outside it, and
    tscope looks at nothing outside the input (docs/security.md)."""
    if len(PurePosixPath(display_path).parts) < 2:
        return False
    split = path.parent.name.lower()
    if not _SPLIT_DIRECTORY.match(split):
        return False
    siblings = (*_TRAIN_DIRECTORIES, *_EVAL_DIRECTORIES)
    return any(_is_folder(path.parent.parent / name) for name in siblings if name != split)


def _is_folder(path: Path) -> bool:
    """A folder that is not a symlink (lstat: a link is never followed, as discovery does)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _split_directory_name(tag: str, name: str, path: Path) -> str:
    directory = path.parent.name
    split = directory.lower()
    own = f"{directory}/{tag.strip()}"
    if split == "train" and _is_folder(path.parent.parent / _FAIRSEQ_INTERVAL_DIRECTORY):
        return f"{own} (epoch mean)"
    if split in _EVAL_DIRECTORIES:
        return EVAL_LOSS if name in (LOSS, EVAL_LOSS) else own
    if split in _TRAIN_DIRECTORIES:
        return name if name != tag.strip() else own
    return own  # a second evaluation subset (fairseq's `valid1/`, `test/`)


def add_text_config(config: BoundedSettings, tag: str, strings: list[bytes]) -> None:
    base_tag = tag[: -len(_TEXT_TAG_SUFFIX)] if tag.endswith(_TEXT_TAG_SUFFIX) else tag
    prefix = _CONFIG_TEXT_TAGS.get(base_tag)
    if prefix is None or not strings:
        return
    text = strings[0].decode("utf-8", errors="replace")
    try:
        # Bounded nesting, int64-safe numbers: the settings end up in case.json and the report.
        parsed = safe_json.loads(text, tag)
    except UnreadableInput:
        parsed = text
    if isinstance(parsed, dict):
        _flatten_into(config, parsed, prefix, depth=0)
    else:
        config.add(base_tag, parsed)


def add_hparams_config(config: BoundedSettings, content: bytes) -> None:
    try:
        hparams = decode_hparams(content)
    except WireFormatError:
        return
    for key, setting in hparams.items():
        config.add(key, setting)


def _flatten_into(config: BoundedSettings, values: dict[str, Any], prefix: str, depth: int) -> None:
    """Nested settings become dotted keys (`optim.betas`); the first writer of a key wins."""
    for key, setting in values.items():
        # Cut before it is joined: each level's name is alive while the next is built.
        name = cut_name(f"{prefix}{cut_name(str(key))}")
        if isinstance(setting, dict) and setting and depth < _MAX_CONFIG_DEPTH:
            _flatten_into(config, setting, f"{name}.", depth + 1)
        else:
            config.add(name, setting)


# DeepSpeed's monitor writes its series against the samples consumed, not the optimizer step
# (`Train/Samples/train_loss`, `/lr`, `/loss_scale` at x = engine.global_samples, which every
# optimizer step advances by the global batch size; deepspeed/runtime/engine.py). With a fixed
# batch every point lies on a multiple of it, one batch apart: divided by that spacing, the x-axis
# is DeepSpeed's own step counter at the time of the write (the loss is written in backward(),
# before the step moves the counter; the LR in step(), after it).
DEEPSPEED_SAMPLES_GROUP = "Train/Samples/"
GLOBAL_BATCH = "global_batch"  # the samples per step a monitor file's spacing showed
# Named here, not in logs/names.py: only this reader moves their x-axis from samples to steps
# (DeepSpeed's W&B and CSV monitors write the same names against samples as well).
DEEPSPEED_SAMPLES_SERIES = {
    f"{DEEPSPEED_SAMPLES_GROUP}train_loss": LOSS,
    f"{DEEPSPEED_SAMPLES_GROUP}lr": LEARNING_RATE,
    f"{DEEPSPEED_SAMPLES_GROUP}loss_scale": LOSS_SCALE,
}


def samples_axis_to_steps(
    steps: np.ndarray, tag_id: np.ndarray, tags: list[str], source: str
) -> tuple[np.ndarray, list[Caveat]]:
    """`steps` with DeepSpeed's samples axis divided by the global batch, and what was done."""
    on_samples = np.asarray([tag.startswith(DEEPSPEED_SAMPLES_GROUP) for tag in tags], dtype=bool)
    rows = on_samples[tag_id] if tag_id.size else np.zeros(0, dtype=bool)
    if not rows.any():
        return steps, []
    logged = np.unique(steps[rows])
    spacings = np.unique(np.diff(logged))
    batch = int(spacings[0]) if spacings.size == 1 else 0
    if batch <= 1 or np.any(logged % batch):
        return steps, [
            Caveat(
                "samples_axis",
                f"DeepSpeed's monitor logs the {DEEPSPEED_SAMPLES_GROUP}* series against the "
                f"samples consumed, and {_why_no_batch(logged.size)}: their steps are sample "
                "counts, not optimizer steps.",
                source,
            )
        ]
    converted = steps.copy()
    converted[rows] = steps[rows] // batch
    return converted, [_divided_caveat(batch, source, "every point is")]


def _divided_caveat(batch: int, source: str, how: str) -> Caveat:
    return Caveat(
        "samples_axis",
        f"DeepSpeed's monitor logs the {DEEPSPEED_SAMPLES_GROUP}* series against the samples "
        f"consumed; {how} {batch} samples after the previous one (the global batch), "
        f"so the steps shown are samples / {batch}: DeepSpeed's step counter when it wrote "
        "the point (the loss before its step is counted, the LR after).",
        source,
        {GLOBAL_BATCH: batch},
    )


def samples_axis_across_files(reads: list[LogRead]) -> list[LogRead]:
    """`reads` with the monitor files whose own points could not show the global batch (a file
    a resume started, holding one point) divided by the batch the run's other monitor files
    showed, when they agree on one and every such point is a multiple of it. Left as sample
    counts, a resumed file's lone loss sits thousands of "steps" after the run's end."""
    batches = {
        int(caveat.numbers[GLOBAL_BATCH])
        for read in reads
        for caveat in read.caveats
        if GLOBAL_BATCH in caveat.numbers
    }
    if len(batches) != 1:
        return reads
    batch = batches.pop()
    resolved = []
    for read in reads:
        undivided = [c for c in read.caveats if c.kind == "samples_axis" and not c.numbers]
        table = read.metrics
        rows = _from_monitor(table.original_name.labels)[table.original_name.codes]
        if not undivided or not rows.any() or np.any(table.step[rows] % batch):
            resolved.append(read)
            continue
        steps = table.step.copy()
        steps[rows] //= batch
        metrics = MetricTable(
            steps, table.metric, table.value, table.source, table.original_name, table.order
        )
        shared = _divided_caveat(
            batch, undivided[0].source, "the run's other monitor files put every point"
        )
        caveats = [shared if c in undivided else c for c in read.caveats]
        resolved.append(replace(read, metrics=metrics, caveats=caveats))
    return resolved


def _why_no_batch(points: int) -> str:
    if points < 2:
        return "one point alone does not show the batch size"
    return "their spacing is not one fixed batch (a batch-size ramp, or points left out)"


def keep_samples_series_apart(reads: list[LogRead]) -> list[LogRead]:
    """`reads` with DeepSpeed's monitor series back under their own tags wherever another file
    of the run logs the same metric itself (the Trainer's or Megatron's TensorBoard beside the
    monitor's, with `tensorboard.enabled` in the DeepSpeed config): one metric from two writers is
    two series, not one. Merged, the two read as segments of one run (resumes at steps 0 and 1)
    in one folder, and as two separate runs (refused) in two."""
    if not any(_from_monitor(read.metrics.original_name.labels).any() for read in reads):
        return reads  # no monitor series: no pass over any row
    native: set[str] = set()
    for read in reads:
        metric, original = read.metrics.metric, read.metrics.original_name
        from_monitor = _from_monitor(original.labels)
        if not from_monitor.any():
            native.update(metric.used_labels())
            continue
        own = metric.codes[~from_monitor[original.codes]]
        held = np.bincount(own, minlength=len(metric.labels)) > 0
        native.update(label for label, is_held in zip(metric.labels, held, strict=True) if is_held)
    if not native:
        return reads
    kept = []
    for read in reads:
        table = read.metrics
        metric, original = table.metric, table.original_name
        taken = np.asarray([label in native for label in metric.labels], dtype=bool)
        apart = _from_monitor(original.labels)[original.codes] & taken[metric.codes]
        if not apart.any():
            kept.append(read)
            continue
        codes = np.where(apart, len(metric.labels) + original.codes, metric.codes)
        renamed = TextColumn(codes, (*metric.labels, *original.labels))
        metrics = MetricTable(table.step, renamed, table.value, table.source, original, table.order)
        kept.append(replace(read, metrics=metrics))
    return kept


def _from_monitor(tags: tuple[str, ...]) -> np.ndarray:
    return np.asarray([tag in DEEPSPEED_SAMPLES_SERIES for tag in tags], dtype=bool)
