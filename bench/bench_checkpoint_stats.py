"""Benchmark: per-tensor checkpoint statistics against `cat` of the same files (issue 15).

    python bench/bench_checkpoint_stats.py                 # two 1.07 GB checkpoints, bf16 and fp32
    python bench/bench_checkpoint_stats.py --gb 0.5 --repeats 5 --numpy --torch

Writes, in a temporary directory, two safetensors checkpoints per dtype (checkpoint-100/ and
checkpoint-200/, each `--gb` GB: one 64 MiB embedding, square matrices, norm vectors), with the
safetensors format written directly (header JSON + raw little-endian bytes). Every round, on a
warm page cache (the files are read once first), alternating so each side sees the same load:

* cat      — `cat` of both files to /dev/null: the machine's warm sequential read (wall, and its
             CPU seconds from getrusage of the child).
* scan     — one fresh child: imports tscope's scan, warms it on a 1-tensor file (imports, the
             numba cache, thread start: the *fixed startup*, printed apart), then scans both
             files (tscope.ingest.checkpoints.stats.safetensors_scan, compiled kernels,
             `--workers` threads): the *marginal* seconds. Ratio = cat / marginal, per round,
             then the median of the rounds (goal >= 0.5).
* reads    — (--reads) the same scan reading every span with os.preadv into a reused buffer
             instead of mapping the large tensors' spans (what the mmap buys; the default
             before it).
* numpy    — (--numpy) the same scan with the numpy fallback kernels (what the `fast` extra buys).
* torch    — (--torch) the torch path (tensor_stats over each tensor read by read_tensor).

The machine's load (os.getloadavg) is printed next to every line: on a shared machine a long
child gets its CPU share while a short `cat` is favoured by the scheduler, so ratios measured
under load understate the quiet machine's. Peak RSS is each child's own (getrusage
RUSAGE_SELF); goal <= 692 MB. Numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
ELEMENT_BYTES = {"BF16": 2, "F32": 4}

CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
start = time.perf_counter()
mode, workers, warm, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
from tscope.ingest.checkpoints.stats import array_kernels
if mode == "numpy":
    for name in ("count_patterns", "float_chunk_kernel", "widen_bf16_kernel"):
        setattr(array_kernels, name, getattr(array_kernels, "_" + name.removesuffix("_kernel") + "_np"))
def scan_all(files):
    tensors = 0
    if mode == "torch":
        from tscope.ingest.checkpoints.safetensors_header import read_header, read_tensor
        from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner
        from tscope.ingest.checkpoints.stats.tensor import tensor_stats
        with ChunkRunner(workers=workers) as runner:
            for path in files:
                for entry in read_header(Path(path), path).entries:
                    tensor_stats(read_tensor(Path(path), entry, path), runner)
                    tensors += 1
        return tensors
    from tscope.ingest.checkpoints.stats import safetensors_scan
    from tscope.ingest.checkpoints.stats.safetensors_scan import scan_safetensors
    if mode == "reads":
        safetensors_scan.MAP_LARGE_SPANS = False
    for path in files:
        for _ in scan_safetensors(Path(path), path, workers=workers):
            tensors += 1
    return tensors
scan_all([warm])
fixed = time.perf_counter() - start
cpu_before = time.process_time()
begin = time.perf_counter()
tensors = scan_all(paths)
marginal = time.perf_counter() - begin
cpu = time.process_time() - cpu_before
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"fixed": fixed, "marginal": marginal, "cpu": cpu, "peak_mb": peak,
                  "tensors": tensors}))
"""


def tensor_shapes(gb: float, element_bytes: int) -> dict[str, tuple[int, ...]]:
    """An LLM-like mix: a 64 MiB embedding, square matrices, norm vectors (~gb × 1e9 bytes)."""
    total = int(gb * 1e9) // element_bytes
    width = 4096
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (64 * MIB // element_bytes // 2048, 2048)}
    left = total - 64 * MIB // element_bytes
    side = 2048 if element_bytes == 4 else 4096  # 16 MiB (fp32) or 32 MiB (bf16) matrices
    for layer in range(left // (side * width + width)):
        shapes[f"layers.{layer}.mlp.weight"] = (side, width)
        shapes[f"layers.{layer}.norm.weight"] = (width,)
    return shapes


def write_checkpoint(path: Path, code: str, gb: float, seed: int) -> None:
    """A safetensors file written by hand (the format is a JSON header and raw bytes)."""
    import numpy as np

    generator = np.random.default_rng(seed)
    block = (0.02 * generator.standard_normal(8 * MIB)).astype(np.float32)  # reused, shifted
    shapes = tensor_shapes(gb, ELEMENT_BYTES[code])
    header: dict[str, object] = {}
    offset = 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * ELEMENT_BYTES[code]
        header[name] = {
            "dtype": code,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(len(raw).to_bytes(8, "little") + raw)
        for index, (name, shape) in enumerate(shapes.items()):
            numel = int(np.prod(shape))
            values = np.resize(np.roll(block, index * 9973), numel)
            if name.endswith("norm.weight"):
                values = 1 + values
            if code == "BF16":
                handle.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())
            else:
                handle.write(values.astype("<f4").tobytes())


def run_child(mode: str, workers: int, warm: Path, paths: list[Path]) -> dict[str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(workers), str(warm), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def cat_seconds(paths: list[Path]) -> tuple[float, float]:
    """(wall, CPU) seconds of `cat` of the files to /dev/null."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.07)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--numpy", action="store_true", help="also the numpy fallback kernels")
    parser.add_argument("--torch", action="store_true", help="also the torch path")
    parser.add_argument("--reads", action="store_true", help="also the scan by reads, no mmap")
    parser.add_argument("--dtypes", nargs="*", default=["BF16", "F32"], choices=["BF16", "F32"])
    arguments = parser.parse_args()
    print(f"start: {load()}, {os.cpu_count()} CPUs, {arguments.workers} workers")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for code in arguments.dtypes:
            warm = root / f"warm-{code}.safetensors"
            write_checkpoint(warm, code, 0.07, seed=9)  # the embedding alone: fixed costs
            paths = [root / code / f"checkpoint-{s}" / "model.safetensors" for s in (100, 200)]
            for seed, path in enumerate(paths):
                write_checkpoint(path, code, arguments.gb, seed)
            size = sum(p.stat().st_size for p in paths)
            modes = (
                ["scan"]
                + ["reads"] * arguments.reads
                + ["numpy"] * arguments.numpy
                + ["torch"] * arguments.torch
            )
            walls: list[float] = []
            cpus: list[float] = []
            results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            ratios: dict[str, list[float]] = {m: [] for m in modes}
            loads: list[float] = []
            run_child("scan", arguments.workers, warm, [warm])  # the numba cache, once
            for _ in range(arguments.repeats):
                cat_seconds([*paths, warm])  # warm the page cache for this round
                wall, cpu = cat_seconds(paths)
                walls.append(wall)
                cpus.append(cpu)
                for mode in modes:
                    result = run_child(mode, arguments.workers, warm, paths)
                    results[mode].append(result)
                    ratios[mode].append(wall / result["marginal"])
                loads.append(os.getloadavg()[0])
            median = statistics.median
            print(
                f"{code}: 2 checkpoints, {size / 1e9:.2f} GB, {arguments.repeats} rounds "
                f"(medians; best in brackets), load over the rounds "
                f"{min(loads):.1f}-{max(loads):.1f}, now {load()}"
            )
            print(
                f"  cat      {median(walls):7.3f} s [{min(walls):.3f}]  "
                f"{size / median(walls) / 1e9:6.2f} GB/s  CPU {median(cpus):.3f} s"
            )
            for mode in modes:
                rows = results[mode]
                marginal = [r["marginal"] for r in rows]
                print(
                    f"  {mode:<6}   marginal {median(marginal):7.3f} s [{min(marginal):.3f}]  "
                    f"{size / median(marginal) / 1e9:6.2f} GB/s  CPU "
                    f"{median([r['cpu'] for r in rows]):.3f} s  "
                    f"ratio to cat {median(ratios[mode]):5.2f} [{max(ratios[mode]):.2f}]  "
                    f"fixed startup {median([r['fixed'] for r in rows]):6.3f} s  "
                    f"peak RSS {max(r['peak_mb'] for r in rows):5.0f} MB"
                )


if __name__ == "__main__":
    main()
