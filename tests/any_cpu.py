"""Replay tests that pass on any CPU: what may be asserted bit for bit, and where.

Bit-for-bit equality of a replay with its log is a property of one machine (same CPU kernels, one
thread, deterministic settings). The runs committed under fixtures/data/trainer/ were recorded on
one CPU; another CPU's kernels (AVX2 vs AVX-512, another MKL path) move their replayed losses by
~2e-7 relative (1.7e-7 measured on a second machine, ATEN_CPU_CAPABILITY=default gives the same).
So:

- committed fixtures are compared within the replay's own fidelity tolerance
  (`REPRODUCED_REL_TOL`), never bit for bit;
- bit-exactness is asserted only on `local_trainer_run` (conftest.py): a short run trained on the
  machine running the tests, by the same Trainer code as the fixtures;
- `like_another_cpu` perturbs a replay the way another CPU does (each restored weight moved by
  about one float32 rounding step), so a test can show that its fixture assertions do not depend
  on the recording CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tscope.replay import api
from tscope.replay.fidelity import REPRODUCED_REL_TOL

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_ENTRY = ROOT / "fixtures/entries/trainer_fixtures.py"
# What another CPU does to a float32 result: about one rounding step (float32 eps is 1.19e-7).
ANOTHER_CPU_REL_PERTURBATION = 2e-7
PERTURBATION_SEED = 0  # a private generator: the caller's global RNG is never touched
# The local run: corrupted_batch's data order and model, 30 steps (its planted step 145 is not
# reached: it is a clean run), a checkpoint every 10 steps. About 3 s of training.
LOCAL_RUN_NAME = "corrupted_batch"
LOCAL_RUN_STEPS = 30
LOCAL_RUN_SAVE_STEPS = 10

__all__ = [
    "ANOTHER_CPU_REL_PERTURBATION",
    "FIXTURE_ENTRY",
    "LOCAL_RUN_NAME",
    "REPRODUCED_REL_TOL",
    "like_another_cpu",
    "within_tolerance",
]


def within_tolerance(replayed: float, logged: float, rel: float = REPRODUCED_REL_TOL) -> bool:
    return abs(replayed - logged) <= rel * abs(logged)


def like_another_cpu(
    monkeypatch: pytest.MonkeyPatch, relative: float = ANOTHER_CPU_REL_PERTURBATION
) -> None:
    """Make every replay in this test start from weights moved by ±`relative` per coordinate,
    as if the checkpoint had been reached on another CPU: the replay then drifts from the log by
    ~1e-7, exactly what a fixture test meets on a machine other than the recording one."""
    restore = api.restore

    def restore_perturbed(*args: Any, **kwargs: Any) -> Any:
        restored = restore(*args, **kwargs)
        generator = torch.Generator().manual_seed(PERTURBATION_SEED)
        with torch.no_grad():
            for parameter in restored.model.parameters():
                signs = torch.randint(0, 2, parameter.shape, generator=generator) * 2 - 1
                parameter.mul_(1 + relative * signs.to(parameter.dtype))
        return restored

    monkeypatch.setattr(api, "restore", restore_perturbed)
