"""Defects bench/ood's second block (docs/accuracy-ood.md) found, reproduced on runs trained by
the real producers (bench/accuracy's generator, in a temporary cache), scored by its scorer.

- ood42, a healthy Lightning run with `accumulate_grad_batches=4` (CSVLogger, a 10-step warm-up
  to 3.6e-3): its fast descent right after the warm-up read as two batches fed again
  (`repeated_data` warning at step 20); trained here as drawn (~15 s), it must stay silent.
  The loss itself is tests/test_repetition_in_first_descent.py's, for the fast loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

OOD_DIR = Path(__file__).resolve().parents[1] / "bench" / "ood"
ACCURACY_DIR = OOD_DIR.parent / "accuracy"
for _directory in (ACCURACY_DIR, OOD_DIR):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

import paths  # noqa: E402, F401  (fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from ood_spec import build_ood_specs  # noqa: E402
from score import score_spec  # noqa: E402
from spec import CONTROL  # noqa: E402

pytest.importorskip("lightning")

RUN_SCRIPT = OOD_DIR / "run.py"


def test_a_lightning_run_accumulating_4_batches_descends_without_repeated_data(
    tmp_path: Path,
) -> None:
    spec = next(s for s in build_ood_specs(blocks=(2,)) if s.index == 42)
    assert spec.producer == "lightning" and spec.cause == CONTROL and spec.grad_accum == 4
    assert generate(tmp_path, [spec], jobs=1, verbose=False, script=RUN_SCRIPT) == []
    run = score_spec(spec, str(run_folder(tmp_path, spec)))
    assert run.right and run.alerts == []
