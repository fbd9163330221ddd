"""Benchmark: tscope's TensorBoard reader against TensorBoard's own EventAccumulator.

    python bench/bench_tensorboard.py                 # 1,000,000 scalars, simple_value
    python bench/bench_tensorboard.py --new-style     # the same as new_style tensors
    python bench/bench_tensorboard.py --points 100000

Writes the event file with torch's SummaryWriter in a temporary directory (about a minute for a
million points), reads it with both readers in the same process, checks that both kept every
point, and prints the times and the ratio; then times a whole `tscope analyze` of the file in a
fresh process (start-up, reading, every analyzer, case.json/html/md written) against the same
EventAccumulator read (issue 15 goal: >= 30x). EventAccumulator is told to keep every scalar
(`size_guidance={"scalars": 0}`); its default keeps 10,000 per tag (DOMAIN.md §3). Numbers only:
nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tscope.ingest.readers.tensorboard import TensorBoardReader

# Four series per step, as the HF Trainer's TensorBoardCallback logs them.
TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/epoch")


def write_events(directory: Path, points: int, new_style: bool) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    # A large queue and no timed flush: the writer's own overhead should not dominate.
    writer = SummaryWriter(log_dir=str(directory), max_queue=10_000, flush_secs=3600)
    steps = math.ceil(points / len(TAGS))
    written = 0
    for step in range(steps):
        for index, tag in enumerate(TAGS):
            if written == points:
                break
            writer.add_scalar(tag, math.sin(step * 1e-3 + index) + 2.0, step, new_style=new_style)
            written += 1
    writer.close()
    return next(directory.glob("events.out.tfevents.*"))


def read_with_tscope(path: Path, verify_checksums: bool) -> tuple[float, dict[str, np.ndarray]]:
    started = time.perf_counter()
    read = TensorBoardReader(verify_checksums=verify_checksums).read(path, path.name)
    elapsed = time.perf_counter() - started
    if read.partial:
        sys.exit(f"tscope reported problems: {read.partial}")
    table = read.metrics.sorted_by("order")
    tags = table.original_name
    return elapsed, {tag: table.value[tags.codes == code] for code, tag in enumerate(tags.labels)}


def read_with_event_accumulator(path: Path, new_style: bool) -> tuple[float, dict[str, np.ndarray]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    started = time.perf_counter()
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    if new_style:  # EventAccumulator files new_style scalars under tensors
        values = {
            tag: np.asarray(
                [tensor_util.make_ndarray(e.tensor_proto).item() for e in accumulator.Tensors(tag)]
            )
            for tag in accumulator.Tags()["tensors"]
        }
    else:
        values = {
            tag: np.asarray([e.value for e in accumulator.Scalars(tag)])
            for tag in accumulator.Tags()["scalars"]
        }
    return time.perf_counter() - started, values


def analyze_whole(path: Path, out: Path, compiled: bool = True) -> float:
    """Seconds for `tscope analyze` of the event file's folder, in a fresh process; with
    `compiled` False the detectors run their numpy loops (TSCOPE_COMPILED_LOOPS=0)."""
    environment = dict(os.environ)
    if not compiled:
        environment["TSCOPE_COMPILED_LOOPS"] = "0"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tscope", "analyze", str(path.parent), "--out", str(out), "-q"],
        check=True,
        capture_output=True,
        env=environment,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="scalars to write")
    parser.add_argument("--new-style", action="store_true", help="write new_style tensors")
    parser.add_argument(
        "--numpy-too",
        action="store_true",
        help="also time the whole analyze with the compiled detector loops off",
    )
    parser.add_argument(
        "--events",
        type=Path,
        help="an event file written by an earlier run of this bench (its folder holds only it): "
        "reused instead of writing a new one (a minute on a quiet machine, ten on a loaded one)",
    )
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        if options.events is not None:
            path = options.events
        else:
            path = write_events(Path(scratch) / "main", options.points, options.new_style)
        size_mb = path.stat().st_size / 1e6
        print(
            f"wrote {options.points:,} scalars ({size_mb:.1f} MB, "
            f"new_style={options.new_style}) in {time.perf_counter() - started:.1f} s"
        )

        # Warm both readers up on a small file first: imports and first-call costs are not reading.
        warm_up = write_events(Path(scratch) / "warm_up", 1_000, options.new_style)
        read_with_tscope(warm_up, verify_checksums=False)
        read_with_event_accumulator(warm_up, options.new_style)

        # The first read of a big file also pays for fresh memory; the ratio uses that one.
        ours, our_values = read_with_tscope(path, verify_checksums=False)
        ours_best = min(
            [ours, *(read_with_tscope(path, verify_checksums=False)[0] for _ in range(2))]
        )
        ours_checked = min(read_with_tscope(path, verify_checksums=True)[0] for _ in range(3))
        theirs, their_values = read_with_event_accumulator(path, options.new_style)

        our_points = sum(len(values) for values in our_values.values())
        their_points = sum(len(values) for values in their_values.values())
        print(f"tscope, first run              {ours:7.2f} s  {our_points:,} points")
        print(f"tscope, best of 3              {ours_best:7.2f} s")
        print(f"tscope, CRC-32C, best of 3     {ours_checked:7.2f} s")
        print(f"EventAccumulator(scalars=0)    {theirs:7.2f} s  {their_points:,} points")
        print(f"ratio EventAccumulator / tscope first run: {theirs / ours:.1f}x")
        analyses = [analyze_whole(path, Path(scratch) / f"case{i}") for i in range(2)]
        whole = min(analyses)
        print(f"tscope analyze (whole), best 2 {whole:7.2f} s  (fresh process each)")
        print(
            f"ratio EventAccumulator / whole tscope analyze: {theirs / whole:.1f}x (goal >= 30x); "
            f"load {os.getloadavg()[0]:.1f}"
        )
        if options.numpy_too:
            numpy_whole = analyze_whole(path, Path(scratch) / "case_numpy", compiled=False)
            same_case = (Path(scratch) / "case_numpy" / "case.json").read_bytes() == (
                Path(scratch) / "case0" / "case.json"
            ).read_bytes()
            print(
                f"tscope analyze, numpy loops   {numpy_whole:7.2f} s  ({numpy_whole / whole:.1f}x "
                f"the compiled one; ratio EventAccumulator / it {theirs / numpy_whole:.1f}x); "
                f"same case.json: {same_case}; load {os.getloadavg()[0]:.1f}"
            )
        same = our_values.keys() == their_values.keys() and all(
            np.array_equal(our_values[tag], their_values[tag]) for tag in their_values
        )
        if our_points != options.points or their_points != options.points or not same:
            sys.exit("the readers disagree or dropped points")
        print("both kept every point, with identical values")


if __name__ == "__main__":
    main()
