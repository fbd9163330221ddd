"""The fixture generator's pieces, made importable for the robustness sweep.

The sweep builds and trains its runs with code from fixtures/ (imported, not copied). This module
puts fixtures/ on `sys.path` and imports from it, so that the other `sweep_*` modules take these
pieces from here and never depend on import order. Importing fixtures/ must leave no __pycache__
in the repository, hence `sys.dont_write_bytecode` (the entry point sets it too, before it imports
any `sweep_*` module).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # importing fixtures/ must leave no __pycache__ in the repository

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO_ROOT / "fixtures"
if str(FIXTURES_DIR) not in sys.path:
    sys.path.insert(0, str(FIXTURES_DIR))

import make_trainer_runs  # noqa: E402
import planted  # noqa: E402
import text_corpus  # noqa: E402
from trainer_run_specs import (  # noqa: E402
    SAVE_STEPS,
    SEED,
    TOTAL_STEPS,
    WARMUP_STEPS,
    Phase,
    RunSpec,
)

__all__ = [
    "FIXTURES_DIR",
    "REPO_ROOT",
    "SAVE_STEPS",
    "SEED",
    "TOTAL_STEPS",
    "WARMUP_STEPS",
    "Phase",
    "RunSpec",
    "make_trainer_runs",
    "planted",
    "text_corpus",
]
