"""Readers of what a run left behind. The commands enter through one call:

    from tscope.ingest import ReadOptions, read_inputs
    inputs = read_inputs(paths, ReadOptions(read_weights=False))

(tscope.ingest.inputs; loaded on first use, so importing a helper such as tscope.ingest.safe_fs
stays cheap.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tscope.ingest.inputs import Inputs, ReadOptions, read_inputs

__all__ = ["Inputs", "ReadOptions", "read_inputs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tscope.ingest import inputs

        return getattr(inputs, name)
    raise AttributeError(f"module 'tscope.ingest' has no attribute {name!r}")
