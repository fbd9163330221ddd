"""Chunked, multi-threaded passes over large tensors with bounded, reused buffers.

Every statistic of the layers table is a sum over chunks: a kernel reduces one chunk (a slice of
a flat tensor, or aligned slices of two) to a few numbers, and the runner hands the kernels'
results back in chunk order, so the merge is deterministic whatever the thread timing.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

# Chunk sizes, in elements, measured on bench/bench_checkpoint_stats.py. The float kernel makes
# ~11 passes over a chunk and its float64 copies: 262,144 elements keep a worker's buffers at
# 4.5 MB, near its cache, while larger chunks fall out of it (1M: 1.6× slower) and smaller ones
# pay the per-call dispatch (64K: 2.5× slower). The 16-bit kernel makes two passes (widen to int32,
# bincount), so it takes 1,048,576. Results do not depend on either (tests vary them).
FLOAT_CHUNK_ELEMENTS = 1 << 18
PATTERN_CHUNK_ELEMENTS = 1 << 20
# Chunks are spread over a few threads (torch kernels release the GIL); results merge in order.
DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))


class Workspace:
    """One worker thread's reusable chunk buffers (allocated once, reused for every chunk).

    Kernels share the names "wide0".."wide2" (float64) and "ints" (int32): a worker runs one
    chunk at a time, so at most 3 × 8 + 4 = 28 bytes per chunk element exist per worker.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, dtype: torch.dtype, length: int) -> torch.Tensor:
        import torch

        held = self._buffers.get(name)
        if held is None or held.dtype != dtype or held.numel() < length:
            held = torch.empty(length, dtype=dtype)
            self._buffers[name] = held
        return held[:length]


T = TypeVar("T")


class ChunkRunner:
    """Runs a per-chunk function over aligned 1-D tensors on a few threads, results in order.

    At most 2 × workers chunks are in flight, so memory is bounded by the workers' buffers (at
    most 28 bytes per chunk element each, see Workspace), never by the tensor size. While a
    runner with several workers is open, torch's own intra-op threads are set to 1: each worker is
    a thread already, and two levels of threads on the same cores measured 1.2-1.5× slower.
    `chunk_elements` overrides every kernel's chunk size (tests use it to vary the chunking).
    """

    def __init__(self, chunk_elements: int | None = None, workers: int = DEFAULT_WORKERS):
        self.chunk_elements = chunk_elements
        self.workers = workers
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(workers, "tscope-stats") if workers > 1 else None
        # torch's own threads, set to 1 on the first torch pass (a runner whose tensors are all
        # scanned from safetensors bytes never imports torch); restored on close.
        self._torch_threads: int | None = None

    def _single_threaded_torch(self) -> None:
        if self._pool is not None and self._torch_threads is None:
            import torch

            self._torch_threads = torch.get_num_threads()
            torch.set_num_threads(1)

    def workspace(self) -> Workspace:
        held: Workspace | None = getattr(self._local, "workspace", None)
        if held is None:
            held = Workspace()
            self._local.workspace = held
        return held

    def map(
        self,
        function: Callable[..., T],
        *flat: torch.Tensor,
        chunk: int = FLOAT_CHUNK_ELEMENTS,
        **keywords: Any,
    ) -> Iterator[T]:
        """Yield function(workspace, *chunks, **keywords) for each chunk, in chunk order."""
        self._single_threaded_torch()
        total = flat[0].numel()
        size = self.chunk_elements or chunk
        starts = range(0, total, size)

        def one(start: int) -> T:
            stop = min(start + size, total)
            return function(self.workspace(), *(t[start:stop] for t in flat), **keywords)

        if self._pool is None or len(starts) == 1:
            yield from (one(start) for start in starts)
            return
        pending: deque[Future[T]] = deque()
        for start in starts:
            pending.append(self._pool.submit(one, start))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._torch_threads is not None:
            import torch

            torch.set_num_threads(self._torch_threads)
            self._torch_threads = None

    def __enter__(self) -> ChunkRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flat_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as 1-D without copying (a copy only if the reader gave a non-contiguous one)."""
    return tensor.reshape(-1) if tensor.is_contiguous() else tensor.contiguous().reshape(-1)
