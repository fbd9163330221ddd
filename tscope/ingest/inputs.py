"""read_inputs(paths, options) -> Inputs: everything under the paths a user named, read once.

    inputs = read_inputs(["runs/exp1"], ReadOptions(read_weights=False))
    inputs.run          # the normalized run: every log's metrics, events, config, partial files
    inputs.checkpoints  # the checkpoints found (and read, with read_weights)

The one entry into ingest for the commands (analyze, cluster, replay, xray): URLs mirrored, the
logs discovered and assembled, the checkpoints listed or read. Building the case from it is the
pipeline's (tscope.pipeline.build_case).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import NothingToAnalyze, SeveralRuns, UsageError
from tscope.ingest.assemble import assemble_run
from tscope.ingest.checkpoints import checkpoint_inventory
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.evidence import read_checkpoints
from tscope.ingest.discover import discover
from tscope.ingest.readers.tensorboard_tags import (
    keep_samples_series_apart,
    samples_axis_across_files,
)
from tscope.ingest.remote_source import is_remote_url
from tscope.ingest.run_config import checkpoint_config
from tscope.ingest.run_groups import run_groups, set_aside_epoch_summaries, several_runs_message
from tscope.ingest.safe_fs import NOT_REGULAR, is_file_refusal, reading_under
from tscope.model import CheckpointInfo, PartialInput, Run
from tscope.model.checkpoint import CheckpointEvidence

if TYPE_CHECKING:
    from tscope.ingest.remote_mirror import Mirror


@dataclass(frozen=True)
class ReadOptions:
    """`trust_pickle` allows legacy pickles (it runs code from the files: only for trusted
    inputs); `read_weights=False` keeps to logs and the checkpoint inventory (fast, no tensor is
    loaded); `on_file` is told each file as it is read (a progress line)."""

    read_weights: bool = True
    trust_pickle: bool = False
    on_file: Callable[[str], None] | None = None
    # The paths are already resolved (a cluster worker's run, checked inside the runs folder):
    # one that resolves elsewhere by now became a link meanwhile and is refused, not followed.
    resolved_paths: bool = False


@dataclass(frozen=True)
class Inputs:
    run: Run  # every point at full resolution
    checkpoints: list[CheckpointInfo]
    checkpoint_evidence: CheckpointEvidence | None  # None: logs only (or nothing readable)


def read_inputs(paths: Sequence[str | Path], options: ReadOptions = ReadOptions()) -> Inputs:
    """Read the logs and checkpoints under `paths` (several are merged into one run).

    Raises UsageError (no path, a missing one), SeveralRuns (a folder holding more than one run)
    and NothingToAnalyze (no metric and no checkpoint that could be read).
    """
    if not paths:
        raise UsageError("Give at least one run directory, checkpoint or log file to analyze.")
    on_file, read_weights = options.on_file, options.read_weights
    reads, partial, checkpoints, unclaimed = [], [], [], []
    # A URL (s3://, gs://, hf://…) is mirrored into the local cache first; everything after reads
    # the mirror like any local folder, and the case names the URL.
    mirrors = [_mirrored(p, read_weights, on_file) for p in paths]
    for mirror in mirrors:
        if mirror is not None:
            partial.extend(mirror.partial)
    named = [Path(p) if m is None else m.root for p, m in zip(paths, mirrors, strict=True)]
    roots = [_named_input(path, options.resolved_paths) for path in named]
    evidence_parts: list[CheckpointEvidence] = []
    side_config: dict[str, Any] = {}
    with reading_under(roots):
        for root in roots:
            found = discover(root, on_file=on_file)
            found.reads = keep_samples_series_apart(samples_axis_across_files(found.reads))
            found.reads, epoch_summaries = set_aside_epoch_summaries(found.reads)
            partial.extend(epoch_summaries)
            if root.is_dir():
                groups = run_groups(found.reads)
                if len(groups) > 1:  # never merged (nor all but one dropped) silently
                    raise SeveralRuns(several_runs_message(str(root), groups))
            reads.extend(found.reads)
            partial.extend(found.partial)
            unclaimed.extend(found.unclaimed)
            inventory = checkpoint_inventory(root)
            checkpoints.extend(inventory)
            for key, value in checkpoint_config(root, inventory).items():
                side_config.setdefault(key, value)
            if read_weights:
                evidence, checkpoint_partial = read_checkpoints(
                    root, LoadOptions(trust_pickle=options.trust_pickle), on_file
                )
                # A file discovery already refused (a link, a FIFO: with its hint) is not listed
                # again by the checkpoint reader that refused it for the same reason.
                refused = {entry.path for entry in partial}
                partial.extend(
                    entry
                    for entry in checkpoint_partial
                    if not (entry.path in refused and is_file_refusal(entry.problem))
                )
                if evidence is not None:
                    evidence_parts.append(evidence)
    name = roots[0].resolve().name if roots[0].is_dir() else roots[0].stem
    shown_input = mirrors[0].url if mirrors[0] is not None else str(roots[0].resolve())
    run = assemble_run(
        name, shown_input, keep_samples_series_apart(samples_axis_across_files(reads)), partial
    )
    for key, value in side_config.items():
        run.config.setdefault(key, value)  # what the logs recorded wins
    checkpoint_evidence = _merge(evidence_parts)
    if checkpoint_evidence is not None:
        checkpoints = [snapshot.info for snapshot in checkpoint_evidence.snapshots]
    # Checkpoints whose every file was refused (all Git LFS pointers, all damaged) are listed by
    # the inventory but hold nothing to judge: without metrics that is not a healthy run.
    no_tensor_read = read_weights and (
        checkpoint_evidence is None or checkpoint_evidence.layers.empty
    )
    if run.metrics.empty and (not checkpoints or no_tensor_read):
        shown = [p if m is None else m.url for p, m in zip(paths, mirrors, strict=True)]
        raise NothingToAnalyze(
            _nothing_message(
                shown,
                partial,
                unclaimed,
                [r.path for r in reads],
                [n for r in reads for n in r.partial],
            )
        )
    return Inputs(run, checkpoints, checkpoint_evidence)


def _mirrored(
    path: str | Path, read_weights: bool, on_file: Callable[[str], None] | None
) -> Mirror | None:
    """The local mirror of a URL input (None for a local path)."""
    if not (isinstance(path, str) and is_remote_url(path)):
        return None
    from tscope.ingest.remote_mirror import mirror_run

    return mirror_run(path, read_weights=read_weights, on_file=on_file)


# A run path, resolved when its sweep was read, that a link has replaced since.
CHANGED_TO_A_LINK = (
    "became a symbolic link while tscope read the sweep; not followed (it may lead outside the "
    "runs folder)"
)


def _named_input(path: Path, already_resolved: bool = False) -> Path:
    """A path the user named, resolved once: the user chose it, so a link here is followed (and
    no link inside it is). Only a folder or a regular file can be read. A path given resolved
    (`ReadOptions.resolved_paths`) that resolves elsewhere now is refused."""
    if not path.exists():
        raise UsageError(f"{path} does not exist. Pass a run directory, checkpoint or log file.")
    resolved = path.resolve()
    if already_resolved and resolved != Path(os.path.abspath(path)):
        raise UsageError(f"{path}: {CHANGED_TO_A_LINK}")
    if not (resolved.is_dir() or resolved.is_file()):
        raise UsageError(f"{path}: {NOT_REGULAR}. Pass a run directory, checkpoint or log file.")
    return resolved


def _merge(parts: list[CheckpointEvidence]) -> CheckpointEvidence | None:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    import pandas as pd

    snapshots = tuple(s for part in parts for s in part.snapshots)
    return CheckpointEvidence(snapshots, pd.concat([p.layers for p in parts], ignore_index=True))


def _nothing_message(
    roots: Sequence[str | Path],
    partial: list[PartialInput],
    unclaimed: list[str],
    read: Sequence[str] = (),
    notes: Sequence[PartialInput] = (),
) -> str:
    """The one line for an input with nothing to analyze; `notes`: what the readers of `read`
    skipped (a step beyond 2**53 on every point), the likely reason it holds nothing."""
    where = ", ".join(str(root) for root in roots)
    if partial:
        first = partial[0]
        return f"Nothing analyzable in {where}: {first.path}: {first.problem}" + (
            f" (and {len(partial) - 1} more unreadable files)" if len(partial) > 1 else ""
        )
    if unclaimed:
        return (
            f"No supported log or checkpoint in {where} ({len(unclaimed)} files of unknown format, "
            f"e.g. {unclaimed[0]}). Supported: trainer_state.json, TensorBoard events, W&B "
            "exports and run dirs, MLflow run folders, CSV/JSONL metrics, stdout logs with "
            "`step N … loss: X` lines "
            "(nanoGPT, Megatron, the Trainer's dicts, torchtitan, fairseq and other loops)."
        )
    if read:  # recognized and read whole, but empty (an event file of empty records)
        files = (
            f"{read[0]} and {len(read) - 1} more files were read but hold"
            if len(read) > 1
            else f"{read[0]} was read but holds"
        )
        why = f" ({notes[0].path}: {notes[0].problem})" if notes else ""
        return (
            f"{where} holds no metric values: {files} no logged points{why}. Pass the run's log "
            "files or checkpoints."
        )
    return f"{where} holds no files. Pass a run directory, checkpoint or log file."
