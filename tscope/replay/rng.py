"""Random number generators: restore them as the producer's resume does, keep the caller's intact.

Order matters only in that every generator is set before the first replayed step; it follows
Trainer._load_rng_state (v5.24 trainer.py:3876-3884): python, numpy, torch CPU, then CUDA.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def restore_rng(state: Mapping[str, Any], device_type: str) -> list[str]:
    """Set the global generators from a Trainer rng_state.pth; returns the ones restored."""
    import numpy as np
    import torch

    restored = []
    if "python" in state:
        random.setstate(_python_state(state["python"]))
        restored.append("python")
    if "numpy" in state:
        np.random.set_state(state["numpy"])
        restored.append("numpy")
    if "cpu" in state:
        torch.random.set_rng_state(state["cpu"])
        restored.append("torch CPU")
    if device_type == "cuda" and "cuda" in state:
        cuda_state = state["cuda"]
        # One process saves get_rng_state() (a tensor); distributed runs save one per device.
        if isinstance(cuda_state, (list, tuple)):
            torch.cuda.random.set_rng_state_all(list(cuda_state))
        else:
            torch.cuda.random.set_rng_state(cuda_state)
        restored.append("CUDA")
    return restored


def _python_state(saved: Any) -> Any:
    """random.setstate wants (version, tuple of ints, gauss); a weights_only load may give lists."""
    if isinstance(saved, list):
        saved = tuple(saved)
    if isinstance(saved, tuple) and len(saved) == 3 and isinstance(saved[1], list):
        saved = (saved[0], tuple(saved[1]), saved[2])
    return saved


def dataloader_epoch_draw() -> None:
    """What `iter(DataLoader)` takes from the global torch RNG at each epoch start (one int64
    for the workers' base seed, torch/utils/data/dataloader.py `_BaseDataLoaderIter.__init__`).

    A Trainer resumed mid-epoch draws before restoring the RNG, which cancels the draw; at an
    epoch start it restores first and then draws, so the replay draws at every epoch start.
    """
    import torch

    torch.empty((), dtype=torch.int64).random_()


@contextmanager
def caller_rng_preserved(device_type: str) -> Iterator[None]:
    """The replay sets and advances every global generator; the caller gets theirs back."""
    import numpy as np
    import torch

    python_state = random.getstate()
    numpy_state = np.random.get_state()
    devices = [torch.cuda.current_device()] if device_type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def rng_fingerprint(device_type: str) -> tuple[bytes, ...]:
    """The global generators' states as bytes (python, numpy, torch CPU, the device's): two equal
    fingerprints around the replayed steps mean they drew no random number (no dropout mask, no
    random batch), so an RNG state the checkpoint lacks cannot explain a mismatch."""
    import pickle

    import numpy as np
    import torch

    states = [
        pickle.dumps(random.getstate()),
        pickle.dumps(np.random.get_state()),
        torch.random.get_rng_state().numpy().tobytes(),
    ]
    if device_type == "cuda" and torch.cuda.is_available():
        states.extend(s.numpy().tobytes() for s in torch.cuda.random.get_rng_state_all())
    return tuple(states)


def max_dropout(model: Any) -> float:
    """The largest dropout probability among the model's dropout modules (0.0 when none)."""
    import torch

    rates = [
        float(module.p)
        for module in model.modules()
        if isinstance(module, torch.nn.modules.dropout._DropoutNd)
    ]
    return max(rates, default=0.0)
