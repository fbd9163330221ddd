"""Which of the files found under one folder belong to the same run.

A folder the user points at may hold one run (its logs, the checkpoint copies of its
trainer_state.json, a resumed run's second log file) or several unrelated ones (the 13B, 104B
and 176B excerpts of a log archive, three trainer_state.json files of different projects, a sweep
with one sub-folder per run). Merging those into one timeline invents resumes and incidents
across models, so the folders are told apart here and the pipeline refuses to merge them.

The rule, from what producers write: the same series (a metric read by the same kind of reader)
logged in several places that are not parts of one run means several runs. Two places are parts
of one run when

- their folders differ only below a folder a producer makes inside a run (`checkpoint-N/`,
  TensorBoard's `runs/`, `wandb/`, …), or
- their file names differ only by a segment suffix a restart adds (`train.log` / `train.1.log` /
  `train-resume.log` / `…-prequel.log`, a W&B run id `_0ydn3v9s`), or are fixed by the producer
  (`events.out.tfevents.<time>.<host>…`).

Files that log different series (`train.log` and `metrics.jsonl`, `train_metrics.csv` and
`eval_metrics.csv`) are parts of one run wherever they sit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from tscope.model import LogRead, PartialInput
from tscope.model.plain_digits import is_plain_digits

# Folders a producer creates inside one run: everything below one belongs to the run above it
# (DVCLive's `plots/metrics/<key>.tsv`, a key's `/` as sub-folders; MLflow's `<run>/metrics/`
# and `params/`, read through the run's meta.yaml by readers/mlflow_files.py).
_RUN_INTERNAL_FOLDER = re.compile(
    r"^(checkpoint[-_]?\d+|ckpt[-_]?\d*|global_step\d+|step[-_]?\d+|iter[-_]?\d+|runs|"
    r"tensorboard|tb|tb_logs|logs?|events|wandb|files|(offline-)?run-.+|latest-run|lightning_logs|"
    r"version_\d+|metrics|params)$",
    re.IGNORECASE,
)
# What a restart appends to a log file's name: a counter, a resume word, a W&B run id (8 base-36
# characters with at least one digit and one letter, as W&B draws them).
_SEGMENT_SUFFIX = re.compile(
    r"[._-]+(\d+|part\d*|seg(ment)?\d*|resumed?\d*|restart(ed)?\d*|cont(inued)?\d*|prequel|sequel|"
    r"(?=[0-9a-z]*\d)(?=[0-9a-z]*[a-z])[0-9a-z]{8})$",
)
# Producers whose file names carry no run identity (wall time, host, pid).
_PRODUCER_NAMED = {"tensorboard": "events.out.tfevents", "wandb_offline": "run.wandb"}
NAMES_SHOWN = 3  # runs named in the message; the rest are counted


@dataclass(frozen=True)
class RunGroup:
    """The files of one run: `label` names it for a person (a folder or a file name)."""

    label: str
    paths: tuple[str, ...]


def run_groups(reads: Sequence[LogRead]) -> list[RunGroup]:
    """The runs among `reads` (paths relative to the folder searched), in path order."""
    by_folder: dict[str, list[LogRead]] = {}
    for read in reads:
        by_folder.setdefault(_place(read)[0], []).append(read)
    units = [unit for found in by_folder.values() for unit in _split_by_name(found)]
    if len(units) > 1 and not _share_a_series([found for found, _ in units]):
        # Different series in different places (train.log beside eval/metrics.csv): one run.
        units = [(list(reads), False)]
    return sorted((_group(found, whole) for found, whole in units), key=lambda g: g.paths)


def _split_by_name(found: list[LogRead]) -> list[tuple[list[LogRead], bool]]:
    """One folder's files as (reads, whole folder?): one run, unless files under different
    names log the same series with the same kind of log (two runs' train logs side by side,
    not train_metrics.csv beside eval_metrics.csv)."""
    by_name: dict[str, list[LogRead]] = {}
    for read in found:
        by_name.setdefault(_place(read)[1], []).append(read)
    if len(by_name) > 1 and _share_a_series(list(by_name.values())):
        return [(named, False) for named in by_name.values()]
    return [(found, True)]


def _share_a_series(units: Sequence[Sequence[LogRead]]) -> bool:
    """Do two of `units` hold the same metric read by the same kind of reader?"""
    seen: set[tuple[str, str]] = set()
    for unit in units:
        series = {(read.kind, str(m)) for read in unit for m in read.metrics.metric.used_labels()}
        if series & seen:
            return True
        seen |= series
    return False


# A table read one row per epoch (metrics_table.py's "epoch_axis" caveat: Keras' CSVLogger)
# beside a per-step log of the same series is that run's epoch summary, not a second run: a blind
# set's Keras-like loop writing batch_log.csv and history.csv (session 29) was refused as "2
# separate runs". Its epochs cannot share the step axis, so it is set aside, named as partial.
EPOCH_SUMMARY_SET_ASIDE = (
    "one row per epoch beside a per-step log of the same run ({step_log}); the per-step log is "
    "read, this epoch summary is not (its epochs are no steps)"
)


def set_aside_epoch_summaries(reads: Sequence[LogRead]) -> tuple[list[LogRead], list[PartialInput]]:
    """(the reads kept, the epoch tables set aside) — see EPOCH_SUMMARY_SET_ASIDE."""
    by_epoch = [r for r in reads if any(c.kind == "epoch_axis" for c in r.caveats)]
    epoch_ids = {id(r) for r in by_epoch}
    by_step = [r for r in reads if id(r) not in epoch_ids]
    set_aside: dict[int, PartialInput] = {}
    for table in by_epoch:
        folder = _place(table)[0]
        series = {str(m) for m in table.metrics.metric.used_labels()}
        step_log = next(
            (
                r
                for r in by_step
                if _place(r)[0] == folder
                and series & {str(m) for m in r.metrics.metric.used_labels()}
            ),
            None,
        )
        if step_log is not None:
            text = EPOCH_SUMMARY_SET_ASIDE.format(step_log=step_log.path)
            set_aside[id(table)] = PartialInput(table.path, text)
    return [r for r in reads if id(r) not in set_aside], list(set_aside.values())


def several_runs_message(where: str, groups: Sequence[RunGroup]) -> str:
    names = ", ".join(group.label for group in groups[:NAMES_SHOWN])
    more = f" and {len(groups) - NAMES_SHOWN} more" if len(groups) > NAMES_SHOWN else ""
    example = groups[0]
    shown = [example.label] if example.label.endswith("/") else list(example.paths)
    first = " ".join(str(PurePosixPath(where) / path) for path in shown[:NAMES_SHOWN])
    return (
        f"{where} holds {len(groups)} separate runs ({names}{more}); tscope does not merge "
        f"unrelated runs into one timeline. Analyze one (e.g. tscope analyze {first}) or compare "
        f"them with tscope cluster {where} (one sub-folder or log file per run)."
    )


def _place(read: LogRead) -> tuple[str, str]:
    """(folder of the run, name of the log within it) for one file."""
    path = PurePosixPath(read.path)
    folders: list[str] = []
    for part in path.parts[:-1]:
        if _RUN_INTERNAL_FOLDER.match(part):
            break
        folders.append(part)
    return "/".join(folders), _log_name(read.kind, path.name)


def _log_name(kind: str, file_name: str) -> str:
    if kind in _PRODUCER_NAMED:
        return _PRODUCER_NAMED[kind]
    stem = file_name.lower()
    while (
        "." in stem
        and len(stem.rsplit(".", 1)[1]) <= 5
        and not is_plain_digits(stem.rsplit(".", 1)[1])
    ):
        stem = stem.rsplit(".", 1)[0]  # .log, .csv, .jsonl, .json, .txt (and .tar.gz-like runs)
    while True:
        shorter = _SEGMENT_SUFFIX.sub("", stem)
        if shorter == stem or not shorter:
            return stem
        stem = shorter


def _group(reads: list[LogRead], whole_folder: bool = False) -> RunGroup:
    """A run, labelled by its folder when it is all of one, else by its first file."""
    paths = tuple(sorted(read.path for read in reads))
    folder = _place(reads[0])[0]
    if whole_folder and folder:
        return RunGroup(folder + "/", paths)
    more = (
        f" (+{len(paths) - 1} more files)"
        if len(paths) > 2
        else " (+1 more file)"
        if len(paths) == 2
        else ""
    )
    return RunGroup(paths[0] + more, paths)
