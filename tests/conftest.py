"""Shared pytest options: `pytest --update-golden` rewrites the golden files after review.

Property tests (hypothesis) run a fixed, reproducible set of cases by default, so CI is never red
by the luck of a draw; `HYPOTHESIS_PROFILE=explore pytest` draws fresh cases each run (run it
after touching a reader: that is how damaged-file bugs are found, then pinned with @example).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite tests/golden/ from the current output instead of comparing against it.",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def local_trainer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short Trainer run made on this machine, once per test session: the only run a test may
    expect a replay to reproduce bit for bit (see tests/any_cpu.py)."""
    from any_cpu import LOCAL_RUN_NAME, LOCAL_RUN_SAVE_STEPS, LOCAL_RUN_STEPS

    if str(FIXTURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIXTURES_DIR))
    from local_trainer_run import train_locally

    run_dir = tmp_path_factory.mktemp("local-trainer-run") / LOCAL_RUN_NAME
    return train_locally(LOCAL_RUN_NAME, run_dir, LOCAL_RUN_STEPS, LOCAL_RUN_SAVE_STEPS)


@pytest.fixture(scope="session")
def byte_llama_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two healthy Trainer runs of a tiny untied byte-level Llama with checkpoints (issue 11's
    controls): a short warm-up (checkpoints every 15 steps) and a gentle one (40 of 60 steps,
    checkpoints every 10). Trained once per session, ~10 s each."""
    if str(FIXTURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIXTURES_DIR))
    from byte_llama_run import train_byte_llama

    root = tmp_path_factory.mktemp("byte-llama")
    return {
        "short_warmup": train_byte_llama(root / "short_warmup", 60, 15, warmup=10),
        "gentle_warmup": train_byte_llama(root / "gentle_warmup", 60, 10, warmup=40),
    }
