"""Benchmark: checkpoint statistics (collect_layers) against a plain sequential read of the file.

    python bench/bench_checkpoint_stats.py                  # 1 GiB fp32 + 1 GiB bf16, cold and warm
    python bench/bench_checkpoint_stats.py --gib 2 --repeats 5
    python bench/bench_checkpoint_stats.py --profile        # where the time goes (one worker)

Writes two safetensors files in a temporary directory (fp32 and bf16, each `--gib` GiB: one
embedding-sized tensor of a quarter of the file plus square matrices and norm vectors). Every
measurement runs in a fresh child process, so its peak RSS (`resource.getrusage`) is its own:

* read   — the file's bytes, start to end, into one reused 16 MiB buffer (`readinto`).
* stats  — `collect_layers` over one handle that opens the file with `safetensors.safe_open` for
           each tensor (the mmap lives as long as the tensor), as a reader should.
* hf     — the same through the real HfTrainerReader (file linked as checkpoint-100/).
* deltas — two handles over the same file (steps 0 and 100): statistics plus the delta pass, so
           two tensors (previous and current) are alive at once: the memory bound's worst case.

Cache state is the same for the two sides of a ratio: "cold" evicts the file from the page cache
with posix_fadvise(DONTNEED) before each child (the VM host may still cache the disk image below,
so cold reads are faster than a real disk); "warm" reads the whole file once before each child.
Read and stats children alternate; the medians are reported. Throughput ratio = read time / stats
time (goal ≥ 0.5); memory goal: peak RSS ≤ 3 × largest tensor + 500 MiB. Numbers only: nothing
here asserts on time.
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
from typing import Any

MIB = 1 << 20
READ_BUFFER = 16 * MIB


def tensor_shapes(gib: float, element_bytes: int) -> dict[str, tuple[int, ...]]:
    """An LLM-like mix: one embedding of a quarter of the file, square matrices, norm vectors."""
    total = int(gib * (1 << 30)) // element_bytes  # elements in the file
    width = 4096 if element_bytes == 4 else 8192
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (total // 4 // 2048, 2048)}
    for layer in range((total - total // 4) // (4096 * width)):
        shapes[f"layers.{layer}.mlp.weight"] = (4096, width)
        shapes[f"layers.{layer}.norm.weight"] = (4096,)
    return shapes


def write_checkpoint(path: Path, dtype_name: str, gib: float) -> None:
    import torch
    from safetensors.torch import save_file

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in tensor_shapes(gib, dtype.itemsize).items():
        if name.endswith("norm.weight"):
            tensors[name] = (1 + 0.05 * torch.randn(shape, generator=generator)).to(dtype)
        else:
            tensors[name] = (0.02 * torch.randn(shape, generator=generator)).to(dtype)
    save_file(tensors, str(path))
    with open(path, "rb+") as file:
        os.fsync(file.fileno())  # clean pages, so DONTNEED can evict them


def largest_tensor_bytes(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        sizes = []
        names: list[str] = handle.keys()
        for key in names:
            view = handle.get_slice(key)
            numel = 1
            for dim in view.get_shape():
                numel *= dim
            sizes.append(numel * (4 if view.get_dtype() == "F32" else 2))
    return max(sizes)


class SafetensorsFile:
    """A CheckpointHandle over one safetensors file, opened anew for every tensor."""

    def __init__(self, path: Path, step: int) -> None:
        from safetensors import safe_open

        from tscope.model import CheckpointInfo

        self.path = path
        self.info = CheckpointInfo(step, path.name, "safetensors", False, False)
        self.partial: list[Any] = []
        with safe_open(str(path), "pt") as handle:
            self._names = sorted(handle.keys())

    def tensor_names(self) -> list[str]:
        return self._names

    def load_tensor(self, name: str) -> Any:
        from safetensors import safe_open

        with safe_open(str(self.path), "pt") as handle:
            return handle.get_tensor(name)  # mmap-backed; unmapped when the tensor is freed

    def optimizer_state(self) -> None:
        return None

    def audit(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


# ---- child processes ------------------------------------------------------------------------


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def vm_hwm_mib() -> float:
    """Peak RSS of this process image (VmHWM; unlike ru_maxrss it starts afresh at exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(mode: str, path: Path, workers: int, gib: float) -> None:
    import torch  # imported before the clock starts: the library imports it lazily

    from tscope.ingest.checkpoint_stats import collect_layers
    from tscope.ingest.checkpoints.base import LoadOptions
    from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader

    del torch
    baseline = vm_rss_mib()  # interpreter + torch + pandas, before any work
    started = time.perf_counter()
    if mode == "read":
        buffer = memoryview(bytearray(READ_BUFFER))
        with open(path, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass
    elif mode == "stats":
        collect_layers([SafetensorsFile(path, 100)], workers=workers)
    elif mode == "hf":
        handle = HfTrainerReader().open(path.parent, path.parent.name, LoadOptions())
        collect_layers([handle], workers=workers)
        handle.close()
    elif mode == "deltas":
        collect_layers([SafetensorsFile(path, 0), SafetensorsFile(path, 100)], workers=workers)
    elif mode == "write":
        write_checkpoint(path, path.parent.parent.name, gib)  # <dtype>/checkpoint-100/
    seconds = time.perf_counter() - started
    # ru_maxrss is kept across exec (it may hold the parent's peak); the parent stays small
    # (torch is only ever imported here), and VmHWM is reported next to it as a check.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result = {"seconds": seconds, "peak_rss_mib": peak, "hwm_mib": vm_hwm_mib()}
    print(json.dumps({**result, "baseline_rss_mib": baseline}))


def run_child(
    mode: str, path: Path, cache: str, workers: int, gib: float = 0.0
) -> dict[str, float]:
    if cache == "none":
        pass
    elif cache == "cold":
        descriptor = os.open(path, os.O_RDONLY)
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(descriptor)
    else:
        buffer = memoryview(bytearray(READ_BUFFER))
        with open(path, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass
    command = [sys.executable, __file__, "--child", mode, "--file", str(path)]
    command += ["--workers", str(workers), "--gib", str(gib)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{mode} child failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ---- profile --------------------------------------------------------------------------------


def profile(path: Path) -> None:
    """cProfile of collect_layers with one worker (so every torch call is on the main thread)."""
    import cProfile
    import pstats

    from tscope.ingest.checkpoint_stats import collect_layers

    run_child("read", path, "warm", 1)  # warm the cache; the first touch of each page still faults
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    collect_layers([SafetensorsFile(path, 100)], workers=1)
    profiler.disable()
    total = time.perf_counter() - started
    print(f"\n{path.name}: {total:.2f} s with one worker (warm cache); top calls by own time:")
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])  # type: ignore[attr-defined]
    for (file, line, function), (_, calls, own, _cumulative, _) in rows[:10]:
        where = function if file == "~" else f"{Path(file).name}:{line}({function})"
        print(f"  {own:6.2f} s  {100 * own / total:5.1f} %  {calls:6d} calls  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of each file, GiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: the library's")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--child", choices=("read", "stats", "hf", "deltas", "write"), help=argparse.SUPPRESS
    )
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from tscope.ingest.chunk_runner import DEFAULT_WORKERS

    workers = args.workers or DEFAULT_WORKERS
    if args.child:
        child(args.child, args.file, workers, args.gib)
        return
    with tempfile.TemporaryDirectory(prefix="tscope-bench-") as scratch:
        for dtype_name in ("float32", "bfloat16"):
            folder = Path(scratch) / dtype_name / "checkpoint-100"
            folder.mkdir(parents=True)
            path = folder / "model.safetensors"
            written = run_child("write", path, "none", workers, args.gib)  # keeps us small
            size, largest = path.stat().st_size, largest_tensor_bytes(path)
            print(
                f"\n{dtype_name}: {size / MIB:.0f} MiB, largest tensor {largest / MIB:.0f} MiB, "
                f"written in {written['seconds']:.0f} s; {workers} worker(s), {os.cpu_count()} CPUs"
            )
            if args.profile:
                profile(path)
                continue
            measure(path, size, largest, args.repeats, workers)


def measure(path: Path, size: int, largest: int, repeats: int, workers: int) -> None:
    limit = 3 * largest / MIB + 500
    for cache in ("cold", "warm"):
        runs: dict[str, list[dict[str, float]]] = {"read": [], "stats": []}
        for _ in range(repeats):
            for mode in runs:
                runs[mode].append(run_child(mode, path, cache, workers))
        read = statistics.median(r["seconds"] for r in runs["read"])
        stats = statistics.median(r["seconds"] for r in runs["stats"])
        peak = max(r["peak_rss_mib"] for r in runs["stats"])
        read_peak = max(r["peak_rss_mib"] for r in runs["read"])
        print(
            f"  {cache}: read {size / read / 1e9:5.2f} GB/s ({read:.2f} s), stats "
            f"{size / stats / 1e9:5.2f} GB/s ({stats:.2f} s): ratio {read / stats:.2f} "
            f"(goal >= 0.5); peak RSS stats {peak:.0f} MiB, read {read_peak:.0f} (limit {limit:.0f})"
        )
    for mode in ("deltas", "hf"):
        result = run_child(mode, path, "warm", workers)
        print(
            f"  {mode} (warm): {result['seconds']:.2f} s, peak RSS {result['peak_rss_mib']:.0f} "
            f"MiB (VmHWM {result['hwm_mib']:.0f}, baseline {result['baseline_rss_mib']:.0f}, "
            f"limit {limit:.0f})"
        )


if __name__ == "__main__":
    main()
