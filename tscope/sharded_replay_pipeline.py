"""Sharded replay: a run trained with FSDP2 and saved with DCP, replayed the same way on N ranks.

    investigation = investigate_sharded("runs/fsdp", around=47, entry="entry.py", nproc=2)

Outside torchrun this process prepares the replay (the run's logs, the DCP checkpoint, the
learning-rate plan), launches `nproc` ranks with torch.distributed.run (`-m
tscope.replay.rank_worker`, gloo on CPU, nccl on CUDA), and assembles their result; under torchrun
(WORLD_SIZE set) every rank runs the replay itself and rank 0 prepares, assembles and returns it,
the other ranks get None. Each rank restores only its shard (sharded_restore), replays its own
batches (sharded_loop) and the global values are all-reduced; the result is judged like a
single-process replay (fidelity.compare, the outlier rules of attribution.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope import __version__
from tscope.errors import TscopeError, UsageError
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.ingest.checkpoints.state_dict_files import step_from_name
from tscope.output_files import write_text
from tscope.replay.select import CheckpointChoice, check_window_end, first_replay_step
from tscope.torchrun import last_error_line, run_ranks

if TYPE_CHECKING:
    from tscope.model import Run
    from tscope.replay.loop import ProgressCallback
    from tscope.replay_pipeline import Investigation

RESULT_FILE = "result.json"
# A rank that has not finished in this long is stuck in a collective (another rank failed).
RANK_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class Prepared:
    run: Run
    choice: CheckpointChoice
    spec: dict[str, Any]
    lr_source: str
    lr_notes: tuple[str, ...]
    lr_caveats: tuple[str, ...]


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def investigate_sharded(
    run_dir: str | Path,
    around: int,
    entry: str | Path,
    window: tuple[int, int],
    nproc: int | None,
    device: str = "cpu",
    deterministic: bool = True,
    statistics: bool = True,
    on_step: ProgressCallback | None = None,
    run: Run | None = None,
) -> Investigation | None:
    """The sharded replay's investigation (rank 0 or the launcher); None on the other ranks.
    `run`: the run's logs when the caller has read them (else rank 0 reads them)."""
    if under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if nproc is not None and nproc != world:
            raise UsageError(f"--nproc {nproc} under torchrun with {world} processes: drop one.")
        return _in_process(run_dir, around, entry, window, device, deterministic, statistics, run)
    if nproc is None or nproc < 2:
        raise UsageError("--nproc N: a sharded replay needs at least 2 processes.")
    started = time.perf_counter()
    prepared = prepare(run_dir, around, entry, window, device, deterministic, statistics, run)
    result = _launch(prepared.spec, nproc, device)
    return assemble(prepared, result, around, window, started)


def prepare(
    run_dir: str | Path,
    around: int,
    entry: str | Path,
    window: tuple[int, int],
    device: str,
    deterministic: bool,
    statistics: bool,
    run: Run | None = None,
) -> Prepared:
    """Choose the DCP checkpoint and plan the learning rates (one process, before any rank)."""
    from tscope.replay.attribution import attribution_steps
    from tscope.replay.entry import load_entry
    from tscope.replay.logs import logged_series
    from tscope.replay.lr_source import plan_learning_rates
    from tscope.replay.sharded_restore import read_folder_metadata, saved_group_lrs

    root = Path(run_dir)
    if not root.is_dir():
        raise UsageError(f"{root} is not a run directory. Pass the folder holding checkpoints.")
    first_wanted, last = around + window[0], around + window[1]
    if first_wanted > last or first_wanted < 0:
        raise UsageError(f"--window {window[0]}:{window[1]} around {around} is empty or negative.")
    loaded = load_entry(entry)
    if run is None:
        from tscope.replay_pipeline import logs_of

        run = logs_of(root)
    choice = choose_dcp_checkpoint(root, first_wanted, last, run)
    logs = logged_series(run, choice.facts, {})
    metadata = read_folder_metadata(choice.path, choice.shown)
    group_lrs = saved_group_lrs(choice.path, choice.shown, metadata)
    first = choice.first_step
    plan = plan_learning_rates(
        first, last, logs.learning_rate, group_lrs, loaded.learning_rate, None
    )
    spec = {
        "run_dir": str(root),
        "checkpoint": str(choice.path),
        "shown": choice.shown,
        "entry": str(entry),
        "first": first,
        "last": last,
        "group_lrs": {str(s): list(plan.for_step(s)) for s in range(first, last + 1)},
        "watched": list(attribution_steps(around)),
        "max_grad_norm": loaded.max_grad_norm,
        "device": device,
        "deterministic": deterministic,
        "statistics": statistics,
    }
    return Prepared(run, choice, spec, plan.source, plan.notes, plan.caveats)


def choose_dcp_checkpoint(
    run_dir: Path, window_start: int, window_end: int | None = None, run: Run | None = None
) -> CheckpointChoice:
    """The newest DCP folder whose next update is at or before the window's first step; with
    `window_end`, refused when that step lies past the run's end (check_window_end)."""
    available = []
    for reader, path, shown in find_checkpoints(run_dir):
        facts = reader.replay_facts
        if facts is None or not facts.sharded:
            continue
        handle = reader.open(path, shown, LoadOptions())
        try:
            step = handle.info.step
        finally:
            handle.close()
        step = step if step is not None else step_from_name(path.name)
        if step is not None:
            available.append(
                CheckpointChoice(
                    path, shown, reader.name, step, first_replay_step(facts, step), facts
                )
            )
    if not available:
        raise UsageError(
            f"No DCP checkpoint in {run_dir}: a sharded replay (--nproc) restores "
            "torch.distributed.checkpoint folders (.metadata + __R_I.distcp)."
        )
    if window_end is not None:
        check_window_end(run_dir, window_end, available, run)
    usable = [c for c in available if c.first_step <= window_start]
    if not usable:
        steps = ", ".join(str(c.step) for c in sorted(available, key=lambda c: c.step))
        raise UsageError(
            f"No DCP checkpoint in {run_dir} precedes step {window_start} (checkpoints at steps "
            f"{steps}). Choose --around and --window so the window starts later."
        )
    return max(usable, key=lambda c: (c.step, c.shown))


def _launch(spec: dict[str, Any], nproc: int, device: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tscope-replay-ranks-") as scratch:
        folder = Path(scratch)
        spec_file = folder / "spec.json"
        write_text(spec_file, json.dumps({**spec, "out": scratch}))
        environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        done = run_ranks(
            "tscope.replay.rank_worker",
            spec_file,
            nproc,
            environment,
            RANK_TIMEOUT_SECONDS,
            f"The {nproc}-process replay",
        )
        errors = sorted(folder.glob("error-*.txt"))
        if errors:
            raise UsageError(errors[0].read_text(encoding="utf-8").strip())
        result_file = folder / RESULT_FILE
        if done.returncode != 0 or not result_file.is_file():
            tail = last_error_line(done)
            raise UsageError(f"The {nproc}-process replay (torchrun, {device}) failed: {tail}")
        result: dict[str, Any] = json.loads(result_file.read_text(encoding="utf-8"))
        return result


def _in_process(
    run_dir: str | Path,
    around: int,
    entry: str | Path,
    window: tuple[int, int],
    device: str,
    deterministic: bool,
    statistics: bool,
    run: Run | None,
) -> Investigation | None:
    import torch.distributed as dist

    from tscope.replay.rank_worker import init_group, run_rank

    started = time.perf_counter()
    created = init_group(device)
    try:
        rank = dist.get_rank()
        prepared: Prepared | None = None
        problem = ""
        if rank == 0:
            try:
                prepared = prepare(
                    run_dir, around, entry, window, device, deterministic, statistics, run
                )
            except TscopeError as error:
                problem = str(error)
        shared: list[Any] = [prepared.spec if prepared is not None else None, problem]
        dist.broadcast_object_list(shared, src=0)
        if shared[1]:
            if rank == 0:
                raise UsageError(shared[1])
            return None
        result = run_rank(shared[0])
        if rank != 0 or prepared is None or result is None:
            return None
        return assemble(prepared, result, around, window, started)
    finally:
        if created:
            dist.destroy_process_group()


def assemble(
    prepared: Prepared,
    result: dict[str, Any],
    around: int,
    window: tuple[int, int],
    started: float,
) -> Investigation:
    """The ranks' records judged as a single-process replay's: fidelity, bad rows, findings."""
    from tscope.analyzers.replay import cause_verdict, replay_findings
    from tscope.model.replay import ReplayResult, ReplayStep, RestoreReport
    from tscope.replay.diagnosis import ReplayConditions
    from tscope.replay.fidelity import compare
    from tscope.replay.logs import logged_series
    from tscope.replay.sharded_results import attribution_from_records
    from tscope.replay_pipeline import Investigation

    records = result["records"]
    steps = [
        ReplayStep(
            step=r["step"],
            loss=r["loss"],
            grad_norm=r["grad_norm"],
            learning_rate=r["learning_rate"],
            micro_losses=tuple(r["micro_losses"]),
            per_sample_loss=tuple(r["per_sample_loss"]),
            layers=r["layers"],
            samples=r["samples"],
            num_items=r["num_items"],
            seconds=r["seconds"],
        )
        for r in records
    ]
    logs = logged_series(prepared.run, prepared.choice.facts, {})
    conditions = ReplayConditions(
        optimizer_restored=result["optimizer_restored"],
        rng_restored=False,
        deterministic=prepared.spec["deterministic"],
        device_type=str(prepared.spec["device"]),
        producer_device=None,
        lr_source=prepared.lr_source,
        rng_consumed=result["rng_consumed"],
        dropout=result["dropout"],
    )
    comparisons, fidelity = compare(steps, logs, conditions)
    report = RestoreReport(
        optimizer=result["optimizer_restored"],
        scheduler=False,
        rng=False,
        scaler=False,
        lr_source=prepared.lr_source,
        loss_path=result["loss_path"],
        notes=tuple(result["notes"]) + prepared.lr_notes,
        caveats=tuple(result["caveats"]) + prepared.lr_caveats,
    )
    attribution = attribution_from_records(records, prepared.spec["watched"])
    bad = attribution.bad_samples()
    skips = attribution.skip_suggestion()
    choice = prepared.choice
    replayed = ReplayResult(
        run_name=Path(prepared.spec["run_dir"]).resolve().name,
        checkpoint_step=choice.step,
        checkpoint_path=choice.shown,
        checkpoint_format=choice.format,
        steps=(choice.first_step, steps[-1].step if steps else choice.first_step - 1),
        around=around,
        window=window,
        device=str(prepared.spec["device"]),
        deterministic=prepared.spec["deterministic"],
        restore=report,
        per_step=tuple(steps),
        comparisons=tuple(comparisons),
        fidelity=fidelity,
        bad_samples=bad,
        skipped=tuple(result["skipped"]),
        seconds=time.perf_counter() - started,
        tool_version=__version__,
        sample_attribution=tuple(r.to_dict() for r in attribution.results),
        skip_suggestion=skips.to_dict() if bad else None,
        cause=cause_verdict([]),
    )
    return Investigation(
        run_dir=prepared.spec["run_dir"],
        result=replayed,
        findings=replay_findings(replayed),
        run=prepared.run,
        skips=skips if bad else None,
    )
