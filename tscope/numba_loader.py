"""numba, imported so that no file in the folder tscope happens to run in can configure it.

numba reads `.numba_config.yaml` from the *current directory* when it is imported, and again
before every compilation (numba.core.config, `_config_fname`), and turns each key into a
`NUMBA_*` setting. In the most common use, `cd RUN && tscope analyze .`, that directory is a
stranger's run folder. A planted file there sets `cache_dir`: numba then writes its cache files
wherever the file says, and loads (unpickles) the cache index it finds there, so a run folder
shipping a crafted index ran its own code inside tscope (red team, session 26).

So numba is imported from an empty folder tscope creates for the moment and removes after, and
the name it looks for afterwards is pointed at a path that cannot exist (below /dev/null, which
is not a folder). The user's own `NUMBA_*` environment variables still apply, as numba documents:
they are the user's, not the input's. Every import of numba in tscope goes through here (the
test suite checks that no other module imports it).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import threading
from typing import Any

# A path no file can have: /dev/null is a character device, never a folder.
_NO_CONFIG_FILE = os.path.join(os.devnull, ".numba_config.yaml")
_LOCK = threading.Lock()


def load_numba() -> Any | None:
    """The numba module, or None when the optional `fast` extra is not installed."""
    with _LOCK:
        if "numba" not in sys.modules:
            try:
                _import_away_from_working_directory()
            except ImportError:
                return None
        numba = sys.modules.get("numba")
        if numba is None:  # a None entry: marked not importable
            return None
        _ignore_config_files(numba)
        return numba


def _import_away_from_working_directory() -> None:
    try:
        here = os.getcwd()
    except FileNotFoundError:  # the working directory was removed: no file can be read there
        importlib.import_module("numba")
        return
    with tempfile.TemporaryDirectory(prefix="tscope-numba-") as empty:
        os.chdir(empty)
        try:
            importlib.import_module("numba")
        finally:
            os.chdir(here)


def _ignore_config_files(numba: Any) -> None:
    config = numba.core.config
    if config._config_fname != _NO_CONFIG_FILE:
        config._config_fname = _NO_CONFIG_FILE
