"""Deterministic kernels for the replay, and the caller's global torch settings given back after.

Deterministic: torch.use_deterministic_algorithms(True) (an op without a deterministic kernel
raises instead of silently varying), cuDNN deterministic and not benchmarking, cuBLAS with a fixed
workspace (CUBLAS_WORKSPACE_CONFIG, read when the first cuBLAS handle is made: it must be set
before CUDA work starts), and one CPU thread — a second thread changes float sums (measured on the
fixtures: 1.7e-7 relative, 26 of 30 losses bit-exact instead of 30). `relaxed` keeps the
process's settings as they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# torch's documented value for deterministic cuBLAS (CUDA >= 10.2): 8 buffers of 4 MiB.
CUBLAS_WORKSPACE = ":4096:8"
# Threads for a deterministic CPU replay; the fixture runs were trained with one thread too.
DETERMINISTIC_CPU_THREADS = 1


@dataclass
class DeterminismReport:
    deterministic: bool
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


@contextmanager
def replay_settings(device_type: str, relaxed: bool = False) -> Iterator[DeterminismReport]:
    """Apply the replay's global settings; restore the previous ones on exit."""
    import torch

    report = DeterminismReport(deterministic=not relaxed)
    saved_algorithms = torch.are_deterministic_algorithms_enabled()
    saved_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    saved_cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    saved_threads = torch.get_num_threads()
    saved_workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        if relaxed:
            report.caveats.append(
                "deterministic settings relaxed: kernels and thread count may change float sums"
            )
        else:
            _apply(device_type, report)
        yield report
    finally:
        torch.use_deterministic_algorithms(saved_algorithms, warn_only=saved_warn_only)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved_cudnn
        torch.set_num_threads(saved_threads)
        if saved_workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved_workspace


def _apply(device_type: str, report: DeterminismReport) -> None:
    import torch

    if device_type == "cuda":
        current = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        if current not in (CUBLAS_WORKSPACE, ":16:8"):
            if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                report.caveats.append(
                    "CUDA was initialized before the replay set CUBLAS_WORKSPACE_CONFIG; set it "
                    f"to {CUBLAS_WORKSPACE} in the environment for deterministic cuBLAS"
                )
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if device_type == "cpu":
        torch.set_num_threads(DETERMINISTIC_CPU_THREADS)
    report.notes.append(
        "deterministic algorithms, cuDNN deterministic"
        + (f", {DETERMINISTIC_CPU_THREADS} CPU thread" if device_type == "cpu" else "")
        + (f", CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE}" if device_type == "cuda" else "")
    )
