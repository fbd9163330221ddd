"""Where things are: the repository, fixtures/ (whose pieces the producers import) and the cache.

Importing this module puts bench/accuracy/ and fixtures/ on `sys.path` and turns off bytecode, so
that neither leaves a __pycache__ in the repository.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True

ACCURACY_DIR = Path(__file__).resolve().parent
REPO_ROOT = ACCURACY_DIR.parents[1]
FIXTURES_DIR = REPO_ROOT / "fixtures"
for _directory in (ACCURACY_DIR, FIXTURES_DIR):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

# Runs are regenerated, never committed: the default cache lives outside the repository.
CACHE_ENV = "TSCOPE_BENCH_CACHE"


def default_cache() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "tscope-bench"
