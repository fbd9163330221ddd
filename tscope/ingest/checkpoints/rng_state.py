"""The RNG state file a Trainer saves (`rng_state[_{rank}].pth`), checked after a safe load.

`Trainer._save_rng_state` writes {"python": random.getstate(), "numpy": np.random.get_state(),
"cpu": torch.random.get_rng_state(), "cuda"/"xpu"/...: device states}. The numpy part is the one
place a weights_only load admits numpy objects (dtype, ndarray), so a forged file can hand back a
dtype that is not uint32 (big-endian, structured, object), a key array of any shape, or a
position out of range; numpy and random then fail deep inside a replay with a traceback. Each
part is checked here against what the real generators produce, so a forged file is one line in
`partial` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.safe_load import key_text, safe_torch_load

MT19937_WORDS = 624  # the Mersenne Twister's state: 624 32-bit words and a position
PYTHON_STATE_WORDS = MT19937_WORDS + 1  # random.getstate(): the words plus the position
# torch's CPU generator state (mt19937 + philox bookkeeping) is 5056 bytes in torch 2.x; device
# generators are 16 bytes (seed, offset). Anything far larger is not a generator state.
MAX_TORCH_STATE_BYTES = 1 << 16


def read_rng_state(path: Path, display_path: str, options: LoadOptions) -> Mapping[str, Any]:
    """An rng_state.pth loaded safely (numpy globals allowed) and checked; else UnreadableInput."""
    state = safe_torch_load(path, display_path, options, allow_numpy=True)
    check_rng_state(state, display_path)
    return state  # type: ignore[no-any-return]  # checked to be a Mapping above


def check_rng_state(state: Any, display_path: str) -> None:
    """Raise UnreadableInput unless `state` looks like what Trainer._save_rng_state wrote."""
    if not isinstance(state, Mapping):
        raise UnreadableInput(display_path, f"holds a {type(state).__name__}, not RNG states")
    _check_parts(list(state.items()), display_path)


def _check_parts(parts: list[tuple[Any, Any]], display_path: str) -> None:
    """check_rng_state of (key, state) pairs. A key is a stranger's object: it is compared only
    when it is a string, and shown through key_text (str() of a tuple repeating one tensor
    300,000 times took over a minute, and of a 100,000-character string was as long)."""
    python: list[str] = []
    numpy: list[str] = []
    devices: list[str] = []
    for key, value in parts:
        if isinstance(key, str) and key == "python":
            if not _is_python_state(value):
                python.append("the python random state")
        elif isinstance(key, str) and key == "numpy":
            if not _is_numpy_state(value):
                numpy.append("the numpy state")
        elif not _is_torch_states(value):
            devices.append(f"the {key_text(key)} state")
    problems = python + numpy + devices
    if problems:
        raise UnreadableInput(
            display_path,
            f"{' and '.join(problems[:3])} is not a generator state (forged or damaged file)",
        )


def _is_python_state(value: Any) -> bool:
    """(version 3, 625 ints in 32-bit range, gauss float | None); lists after a weights load."""
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        return False
    version, words, gauss = value
    return (
        version == 3
        and isinstance(words, (tuple, list))
        and len(words) == PYTHON_STATE_WORDS
        and all(_is_int(w) and 0 <= w < (1 << 32) for w in words[:MT19937_WORDS])
        and _is_int(words[-1])
        and 0 <= words[-1] <= MT19937_WORDS
        and (gauss is None or isinstance(gauss, float))
    )


def _is_numpy_state(value: Any) -> bool:
    """('MT19937', uint32[624] native order, pos in 0..624, has_gauss 0/1, cached float)."""
    import numpy as np

    if not isinstance(value, (tuple, list)) or len(value) != 5:
        return False
    name, keys, position, has_gauss, cached = value
    return (
        name == "MT19937"
        and isinstance(keys, np.ndarray)
        and keys.dtype == np.dtype(np.uint32)
        and keys.dtype.isnative
        and keys.shape == (MT19937_WORDS,)
        and _is_int(position)
        and 0 <= position <= MT19937_WORDS
        and has_gauss in (0, 1)
        and isinstance(cached, (float, int))
    )


def _is_torch_states(value: Any) -> bool:
    """A generator state tensor (uint8, 1-D, small), or a list of them (one per device)."""
    import torch

    values = value if isinstance(value, (list, tuple)) else [value]
    return len(values) <= 4096 and all(
        isinstance(v, torch.Tensor)
        and v.dtype == torch.uint8
        and v.dim() == 1
        and v.numel() <= MAX_TORCH_STATE_BYTES
        for v in values
    )


def _is_int(value: Any) -> bool:
    import numpy as np

    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


# accelerate's `save_accelerator_state` keys, and the Trainer keys whose checks they share.
_ACCELERATE_RNG_KEYS = {
    "random_state": "python",
    "numpy_random_seed": "numpy",
    "torch_manual_seed": "cpu",
}


def read_accelerate_rng_state(
    path: Path, display_path: str, options: LoadOptions
) -> Mapping[str, Any]:
    """accelerate's `random_states_{rank}.pkl` (a torch.save file despite its name: {"step":
    the accelerator's accumulation counter, "random_state", "numpy_random_seed",
    "torch_manual_seed", "torch_{device}_manual_seed": …}) loaded safely and checked as
    read_rng_state checks the Trainer's; else UnreadableInput."""
    state = safe_torch_load(path, display_path, options, allow_numpy=True)
    if not isinstance(state, Mapping):
        raise UnreadableInput(display_path, f"holds a {type(state).__name__}, not RNG states")
    step = state.get("step")
    if step is not None and not _is_int(step):
        raise UnreadableInput(display_path, "its step is not a whole number (forged or damaged)")
    _check_parts(
        [
            (_ACCELERATE_RNG_KEYS.get(key, key) if isinstance(key, str) else key, value)
            for key, value in state.items()
            if not (isinstance(key, str) and key == "step")
        ],
        display_path,
    )
    return state  # type: ignore[no-any-return]  # checked to be a Mapping above
