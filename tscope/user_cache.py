"""Where tscope keeps its own per-user cache (remote mirrors, compiled templates): a leaf that every
layer may import, like tscope.errors."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """$TSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/tscope, else ~/.cache/tscope."""
    configured = os.environ.get("TSCOPE_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tscope"
