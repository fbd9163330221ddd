"""A `.numba_config.yaml` in the folder tscope runs in configures nothing (tscope/numba_loader.py):
numba reads that file from the working directory, and `cd STRANGERS_RUN && tscope analyze .` is
the most common use. Found by the red team: `cache_dir` sent numba's cache files outside `--out`
and made numba unpickle a cache index shipped with the run."""

from __future__ import annotations

import ast
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]
TSCOPE = Path(sys.executable).with_name("tscope")


class _LeavesAMark:
    """Unpickling this writes a file: the planted cache index of the attack."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.write_text, (self.marker, "ran"))


def long_run(folder: Path) -> Path:
    folder.mkdir()
    # Long enough for the compiled kernels (and so numba's cache) to be used.
    rows = [f"{step},{3 * math.exp(-step / 500) + 5 * (step == 1500)}" for step in range(2000)]
    (folder / "metrics.csv").write_text("step,loss\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def analyze_in(folder: Path, out: Path, **environment: str) -> None:
    result = subprocess.run(
        [str(TSCOPE), "analyze", ".", "--out", str(out), "--quiet"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **environment},
    )
    assert result.returncode == 0, result.stderr
    assert (out / "case.json").is_file()


@pytest.mark.slow
def test_a_config_file_in_the_run_folder_does_not_move_numbas_cache(tmp_path):
    run = long_run(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / ".numba_config.yaml").write_text(f"cache_dir: {outside}\n", encoding="utf-8")
    analyze_in(run, tmp_path / "case")
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_cache_index_shipped_with_the_run_is_never_unpickled(tmp_path):
    # Where numba keeps the index of each kernel under a cache folder (the user's own setting).
    probe = tmp_path / "probe"
    analyze_in(long_run(tmp_path / "plain"), tmp_path / "plain-case", NUMBA_CACHE_DIR=str(probe))
    indexes = [path.relative_to(probe) for path in probe.rglob("*.nbi")]
    assert indexes
    # The same names, planted in the run as pickles that act when loaded, and a config file
    # pointing numba's cache at them.
    run = long_run(tmp_path / "run")
    marker = tmp_path / "unpickled"
    for index in indexes:
        (run / ".nbcache" / index).parent.mkdir(parents=True, exist_ok=True)
        (run / ".nbcache" / index).write_bytes(pickle.dumps(_LeavesAMark(marker)))
    (run / ".numba_config.yaml").write_text("cache_dir: .nbcache\n", encoding="utf-8")
    analyze_in(run, tmp_path / "case")
    assert not marker.exists()


def test_numba_is_imported_nowhere_else():
    importers = []
    for folder in ("tscope", "analyzers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "numba_loader.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Call) and _called(node) in {
                    "import_module",
                    "__import__",
                }:
                    names = [arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant)]
                if any(name == "numba" or name.startswith("numba.") for name in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert importers == []


def _called(call: ast.Call) -> str:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
