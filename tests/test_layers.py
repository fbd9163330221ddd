"""Imports point one way: ingest → model → analyzers → render; the CLI sits on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Which tscope packages each layer may import from (besides itself and tscope.errors).
# tscope.output_files is the one writer (never through a link; docs/security.md): a leaf like
# tscope.errors, used by every layer that writes a file (layers.parquet, reports, skip lists).
ALLOWED = {
    "tscope/model": {"tscope.model"},
    "tscope/ingest": {
        "tscope.ingest",
        "tscope.model",
        "tscope.errors",
        "tscope.output_files",
        "tscope.user_cache",
        "tscope.numba_loader",
    },
    # tscope.numba_loader: the one import of numba, away from the working directory's config file
    "analyzers": {"tscope.analyzers", "tscope.model", "tscope.errors", "tscope.numba_loader"},
    "tscope/render": {
        "tscope.render",
        "tscope.model",
        "tscope.errors",
        "tscope.templates",
        "tscope.output_files",
        # the one JSON encoding (output_writer.json_text) of case.json and cluster.json
        "tscope.output_writer",
        # compiled templates kept in the user's cache (render/template_cache.py): read through the
        # one guarded reader (a leaf that imports only tscope.errors), found where tscope keeps
        # its cache
        "tscope.ingest.safe_fs",
        "tscope.user_cache",
    },
    # Replay restores from checkpoints (ingest) into the model's dataclasses; it reads the logs
    # through tscope.ingest.read_inputs and the analyzers' view of the loss.
    "tscope/replay": {
        "tscope.replay",
        "tscope.ingest",
        "tscope.model",
        "tscope.errors",
        "tscope.analyzers.signals",
        "tscope.output_files",
    },
}
# Modules a layer may import by exact name only (not their subpackages): the package's version.
EXACT = {"tscope/replay": {"tscope"}}


def tscope_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "tscope" or name.startswith("tscope.")}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    allowed = ALLOWED[layer]
    exact = EXACT.get(layer, set())
    for path in sorted((ROOT / layer).rglob("*.py")):
        for name in tscope_imports(path):
            assert name in exact or any(name == a or name.startswith(a + ".") for a in allowed), (
                f"{path.relative_to(ROOT)} imports {name}; {layer} may import only {sorted(allowed)}"
            )
