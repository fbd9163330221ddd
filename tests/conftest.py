"""Shared pytest options: `pytest --update-golden` rewrites the golden files after review.

Property tests (hypothesis) run a fixed, reproducible set of cases by default, so CI is never red
by the luck of a draw; `HYPOTHESIS_PROFILE=explore pytest` draws fresh cases each run (run it
after touching a reader: that is how damaged-file bugs are found, then pinned with @example).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

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
