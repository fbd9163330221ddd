"""Benchmark: per-tensor checkpoint statistics against `cat` of the same files (issue 15).

    python bench/bench_checkpoint_stats.py                 # two 1.07 GB checkpoints, bf16 and fp32
    python bench/bench_checkpoint_stats.py --gb 0.5 --repeats 5 --workers 2

Writes, in a temporary directory, two safetensors checkpoints per dtype (checkpoint-100/ and
checkpoint-200/, each `--gb` GB: one 64 MiB embedding, square matrices, norm vectors), with the
safetensors format written directly (header JSON + raw little-endian bytes). All measurements run
in fresh child processes, alternating so each side sees the same load, on a warm page cache (every
file is read once before the round):

* cat      — `cat` of both files to /dev/null: the machine's warm sequential read.
* scan     — tscope.ingest.checkpoints.stats.safetensors_scan over both files (compiled kernels, `--workers` threads),
             in one child; "fixed" is the same child on a 1-tensor file (interpreter, imports, JIT
             cache load), so marginal = scan − fixed. Ratio = cat / marginal (goal ≥ 0.5).
* numpy    — the same scan with the numpy fallback kernels (what the `fast` extra buys).
* torch    — the torch path this replaces (tensor_stats over each tensor read by read_tensor),
             once per round, its own fixed cost (import torch) included as printed.

Peak RSS is each child's own (`resource.getrusage(RUSAGE_SELF)`); goal ≤ 692 MB. Prints medians.
Numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
ELEMENT_BYTES = {"BF16": 2, "F32": 4}

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
start = time.perf_counter()
mode, workers, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
from tscope.ingest.checkpoints.stats import array_kernels
if mode == "numpy":
    for name in ("count_patterns", "float_chunk_kernel", "widen_bf16_kernel"):
        setattr(array_kernels, name, getattr(array_kernels, "_" + name.removesuffix("_kernel") + "_np"))
tensors = 0
if mode == "torch":
    from tscope.ingest.checkpoints.safetensors_header import read_header, read_tensor
    from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner
    from tscope.ingest.checkpoints.stats.tensor import tensor_stats
    with ChunkRunner(workers=workers) as runner:
        for path in paths:
            for entry in read_header(Path(path), path).entries:
                tensor_stats(read_tensor(Path(path), entry, path), runner)
                tensors += 1
else:
    from tscope.ingest.checkpoints.stats.safetensors_scan import scan_safetensors
    for path in paths:
        for _ in scan_safetensors(Path(path), path, workers=workers):
            tensors += 1
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak, "tensors": tensors}))
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


def run_child(mode: str, workers: int, paths: list[Path]) -> dict[str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(workers), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def cat_seconds(paths: list[Path]) -> float:
    start = time.perf_counter()
    subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.07)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch path")
    parser.add_argument("--dtypes", nargs="*", default=["BF16", "F32"], choices=["BF16", "F32"])
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tiny = root / "tiny.safetensors"
        write_checkpoint(tiny, "F32", 0.07, seed=0)  # the embedding alone: fixed costs
        for code in arguments.dtypes:
            paths = [root / code / f"checkpoint-{s}" / "model.safetensors" for s in (100, 200)]
            for seed, path in enumerate(paths):
                write_checkpoint(path, code, arguments.gb, seed)
            size = sum(p.stat().st_size for p in paths)
            modes = ["scan", "numpy"] + ([] if arguments.no_torch else ["torch"])
            rows: dict[str, list[float]] = {m: [] for m in ["cat", "fixed", *modes]}
            peaks: dict[str, float] = {m: 0.0 for m in modes}
            run_child("scan", arguments.workers, [tiny])  # the numba cache, once
            for _ in range(arguments.repeats):
                cat_seconds([*paths, tiny])  # warm the page cache for this round
                rows["cat"].append(cat_seconds(paths))
                rows["fixed"].append(run_child("scan", arguments.workers, [tiny])["seconds"])
                for mode in modes:
                    result = run_child(mode, arguments.workers, paths)
                    rows[mode].append(result["seconds"])
                    peaks[mode] = max(peaks[mode], result["peak_mb"])
            median = {m: statistics.median(v) for m, v in rows.items()}
            print(f"{code}: 2 checkpoints, {size / 1e9:.2f} GB, {arguments.workers} workers, "
                  f"{arguments.repeats} rounds (medians)")  # fmt: skip
            print(
                f"  cat            {median['cat']:7.3f} s  {size / median['cat'] / 1e9:6.2f} GB/s"
            )
            print(f"  fixed startup  {median['fixed']:7.3f} s  (1-tensor file: imports, JIT cache)")
            for mode in modes:
                marginal = max(median[mode] - median["fixed"], 1e-9)
                print(
                    f"  {mode:<6} {median[mode]:7.3f} s  marginal {marginal:6.3f} s  "
                    f"{size / marginal / 1e9:6.2f} GB/s  ratio to cat {median['cat'] / marginal:5.2f}"
                    f"  peak RSS {peaks[mode]:5.0f} MB"
                )


if __name__ == "__main__":
    main()
