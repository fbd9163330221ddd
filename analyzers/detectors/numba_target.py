"""numba's first kernel call in a process, without two optional modules tscope's kernels never use.

The first call of any numba kernel (even one loaded from numba's cache) initializes numba's CPU
target, which imports every lowering registry of numba. Two of them import optional packages:
numba.np.arraymath imports scipy.linalg to learn whether BLAS is there (for np.dot and
np.linalg in compiled code), and numba.core.typing.cffi_utils builds a cffi.FFI (pycparser then
compiles its lexer). numba guards both with `except ImportError` and goes on without them; they
took ~0.2 s of CPU of the ~0.45 s that the first kernel call costs, out of ~2.3 s for a whole
analyze of a 1,000,000-scalar event file. tscope's kernels (compiled_loops, rolling_kernels) use
neither BLAS nor cffi.

So, during that first call only, the modules are marked as not importable in sys.modules (a None
entry, Python's own marker), unless something imported them already; the marks are removed
right after, so a later `import scipy.linalg` or `import cffi` in the process works as usual.
Nothing of numba is modified. Should a numba version need one of them after all, the call is
made again as it comes. The price: in a process where this ran first, numba-compiled code has no
np.dot / np.linalg (numba found no BLAS) and no cffi functions; no kernel of tscope's uses them
(checkpoints/stats/array_kernels' np.dot is in its numpy fallbacks only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# What the target's initialization imports and the kernels never need (see above).
_UNUSED_OPTIONAL_MODULES = ("cffi", "scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")
_FIRST_CALL_MADE: list[bool] = []


def without_unused_optional_modules(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` (a numba dispatcher), whose call initializes numba's target without the unused
    optional modules when it is the process's first kernel call through here."""

    def call(*args: Any) -> Any:
        if _FIRST_CALL_MADE:
            return kernel(*args)
        _FIRST_CALL_MADE.append(True)
        try:
            with _hidden(_UNUSED_OPTIONAL_MODULES):
                return kernel(*args)
        except ImportError:  # a numba that needs them: initialize as it comes
            return kernel(*args)

    return call


@contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """`import name` raises ImportError inside, for the names not imported yet."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
