"""No code from the Hugging Face Hub while tscope builds or runs a model from a stranger's config.

transformers fetches compiled kernels from the Hub (the `kernels` package) and imports them, on
its own initiative: RWKV's attention loads `kernels-community/rwkv` when CUDA and ninja are
present, an `experts_implementation` such as `sonicmoe` fetches `kernels-community/sonic-moe` at
the first forward pass on a Hopper GPU, and `use_kernels` asks for a whole mapping (red team,
session 26). A config.json in a run folder chooses all of these. tscope reads runs offline and
never runs downloaded code: within `hub_code_refused()` every way in is closed, and restored
after (a remote run's own files are mirrored before any model is built, tscope/ingest/
remote_mirror.py):

  * `USE_HUB_KERNELS=0`, which transformers reads at each call, and HF_HUB_OFFLINE, for the
    huggingface_hub calls that read the environment;
  * huggingface_hub's own offline switch, read at each call;
  * transformers' kernel loaders (`get_kernel`, `lazy_load_kernel`) and the `kernels` package's
    `get_kernel` refuse: the models fall back to their torch code, as without `kernels`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_ENVIRONMENT = {"USE_HUB_KERNELS": "0", "HF_HUB_OFFLINE": "1"}


class HubCodeRefused(ImportError):
    """A model asked for a kernel from the Hub; an ImportError, which transformers' models catch
    to fall back to their torch code."""


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise HubCodeRefused("tscope runs no code from the Hugging Face Hub")


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None  # lazy_load_kernel's "no kernel": the caller uses its torch path


@contextmanager
def hub_code_refused() -> Iterator[None]:
    saved_environment = {name: os.environ.get(name) for name in _ENVIRONMENT}
    os.environ.update(_ENVIRONMENT)
    patches: list[tuple[Any, str, Any]] = []

    def patch(module: Any, name: str, value: Any) -> None:
        if module is not None and hasattr(module, name):
            patches.append((module, name, getattr(module, name)))
            setattr(module, name, value)

    patch(sys.modules.get("huggingface_hub.constants"), "HF_HUB_OFFLINE", True)
    loaders = _transformers_kernel_loaders()
    patch(loaders, "get_kernel", _refuse)
    patch(loaders, "lazy_load_kernel", _nothing)
    patch(loaders, "get_kernel_hub", _refuse)
    patch(sys.modules.get("kernels"), "get_kernel", _refuse)
    try:
        yield
    finally:
        for module, name, value in reversed(patches):
            setattr(module, name, value)
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _transformers_kernel_loaders() -> Any:
    """transformers' hub_kernels module, imported now so its loaders can be replaced before a
    model module imports them; None without transformers (nothing to guard)."""
    if "transformers" not in sys.modules:
        return None
    try:
        return importlib.import_module("transformers.integrations.hub_kernels")
    except Exception:  # an older transformers without Hub kernels: nothing to guard
        return None
