"""torch.load that never executes a stranger's pickle unless the user explicitly trusts the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions

TRUST_HINT = "If you trust the file, pass --trust-pickle."


def _numpy_rng_globals() -> list[Any]:
    """The numpy objects a saved np.random.get_state() tuple needs, as the HF Trainer allows them
    (trainer_pt_utils.safe_globals): _reconstruct, ndarray, dtype and the UInt32 dtype class."""
    import importlib

    import numpy as np

    allowed: list[Any] = [np.ndarray, np.dtype]
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    allowed.append(multiarray._reconstruct)
    allowed.append(type(np.dtype(np.uint32)))
    return allowed


def safe_torch_load(
    path: Path, display_path: str, options: LoadOptions, *, allow_numpy: bool = False
) -> Any:
    """Load a torch file with weights_only=True (tensors, dicts, lists, numbers, strings only).

    `allow_numpy` adds the numpy globals that RNG state files hold. Anything else is refused with a
    message naming the file and the --trust-pickle opt-in; with trust_pickle the file is loaded
    with weights_only=False and a warning on stderr, because that runs code from the file.
    """
    import torch

    try:
        if options.trust_pickle:
            print(
                f"tscope: warning: unpickling {display_path} with --trust-pickle: this runs code "
                "from the file.",
                file=sys.stderr,
            )
            return torch.load(path, map_location="cpu", weights_only=False, mmap=_is_zip(path))
        if allow_numpy:
            with torch.serialization.safe_globals(_numpy_rng_globals()):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=_is_zip(path))
        return torch.load(path, map_location="cpu", weights_only=True, mmap=_is_zip(path))
    except Exception as error:  # a stranger's file: every failure becomes one explained line
        text = str(error)
        if "weights_only" in text or "Unsupported global" in text or "GLOBAL" in text:
            raise UnreadableInput(
                display_path, "it holds pickled objects outside the safe set", TRUST_HINT
            ) from error
        first_line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        raise UnreadableInput(
            display_path, f"not a readable torch file ({first_line[:200]})"
        ) from error


def _is_zip(path: Path) -> bool:
    """mmap works for the zip format (torch >= 1.6 default); legacy files must be read whole."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False
