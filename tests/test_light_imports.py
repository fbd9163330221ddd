"""Heavy libraries load only on the paths that need them: a logs-only analyze stays light.

A behaviour test (which modules a child process ends up holding), not a timed one: the startup's
seconds are measured by bench/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Libraries a CSV of metrics never needs: the checkpoint, change-point and model stacks.
HEAVY_FOR_LOGS = ("torch", "safetensors", "scipy", "sklearn", "ruptures", "transformers")

ANALYZE_AND_LIST_MODULES = """
import json, sys
import tscope.cli
sys.argv = ["tscope", "analyze", sys.argv[1], "--out", sys.argv[2], "-q"]
try:
    tscope.cli.main()
except SystemExit as stop:
    code = stop.code
else:
    code = 0
print(json.dumps({"exit": code, "modules": sorted(m.split(".")[0] for m in sys.modules)}))
"""


def analyzed_in_a_child(path: Path, out: Path) -> dict[str, Any]:
    """Analyze `path` into `out` in a fresh interpreter; its exit and the modules it loaded."""
    completed = subprocess.run(
        [sys.executable, "-c", ANALYZE_AND_LIST_MODULES, str(path), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def test_analyzing_a_csv_imports_no_checkpoint_or_model_library(tmp_path: Path) -> None:
    csv = tmp_path / "metrics.csv"
    csv.write_text("step,loss\n" + "".join(f"{s},{3 - s * 0.01:.3f}\n" for s in range(1, 41)))
    result = analyzed_in_a_child(csv, tmp_path / "case")
    assert result["exit"] in (0, None)
    assert (tmp_path / "case" / "case.json").is_file()
    assert set(HEAVY_FOR_LOGS) & set(result["modules"]) == set()


# Not even pandas (~40% of the startup when the metric table was a DataFrame, issue 15) nor numba
# (loaded for series of 200 points or more, with scipy and yaml behind it), nor PyYAML.
NOT_FOR_SMALL_LOGS = (*HEAVY_FOR_LOGS, "pandas", "numba", "yaml")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "data"


def _three_row_csv(folder: Path) -> Path:
    csv = folder / "metrics.csv"
    csv.write_text("step,loss\n1,2.0\n2,1.9\n3,1.8\n")
    return csv


@pytest.mark.parametrize(
    "log",
    [
        "three-row CSV",
        "trainer/stable_long_logging/checkpoint-240/trainer_state.json",  # transformers.Trainer
        "layer_tb/healthy",  # torch.utils.tensorboard.SummaryWriter
    ],
)
def test_a_small_logs_only_analyze_imports_no_pandas(tmp_path: Path, log: str) -> None:
    path = _three_row_csv(tmp_path) if log == "three-row CSV" else FIXTURES / log
    result = analyzed_in_a_child(path, tmp_path / "case")
    assert result["exit"] in (0, None)
    assert (tmp_path / "case" / "case.json").is_file()
    assert set(NOT_FOR_SMALL_LOGS) & set(result["modules"]) == set()
    if log != "three-row CSV":  # only tables are parsed with Arrow
        assert "pyarrow" not in result["modules"]


def test_analyzing_safetensors_checkpoints_imports_no_torch(tmp_path: Path) -> None:
    """Two HF checkpoints written by safetensors itself: statistics and deltas from raw bytes."""
    writer = (
        "import sys, torch\n"
        "from safetensors.torch import save_file\n"
        "g = torch.Generator().manual_seed(0)\n"
        "for step in (100, 200):\n"
        "    w = {'h.0.mlp.weight': torch.randn(512, 512, generator=g).to(torch.bfloat16),\n"
        "         'ln_f.weight': torch.ones(512)}\n"
        "    save_file(w, f'{sys.argv[1]}/checkpoint-{step}/model.safetensors')\n"
    )
    for step in (100, 200):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", writer, str(tmp_path / "run")], check=True)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            ANALYZE_AND_LIST_MODULES,
            str(tmp_path / "run"),
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["exit"] in (0, None)
    layers = (tmp_path / "c" / "layers.parquet").stat().st_size
    assert layers > 0
    assert "torch" not in result["modules"]


def test_a_long_logs_only_analyze_imports_no_pandas_where_numba_is(tmp_path: Path) -> None:
    """A 20,000-step log: its rolling statistics (spike score over 1,000 points, the gradient
    norm's median over a tenth of the run) come from the compiled loops, not pandas."""
    pytest.importorskip("numba")
    state = json.loads(
        (FIXTURES / "trainer/stable_long_logging/checkpoint-240/trainer_state.json").read_text()
    )
    steps = range(1, 20_001)
    state["log_history"] = [
        {"step": s, "loss": 3.0 / (1 + s / 500) + 0.01 * ((s * 7919) % 13) / 13,
         "grad_norm": 1.0 + 0.1 * ((s * 104729) % 17) / 17, "learning_rate": 1e-4}
        for s in steps
    ]  # fmt: skip
    state["global_step"] = state["max_steps"] = steps[-1]
    folder = tmp_path / "checkpoint-20000"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps(state))
    result = analyzed_in_a_child(folder / "trainer_state.json", tmp_path / "case")
    assert result["exit"] in (0, None)
    assert (tmp_path / "case" / "case.json").is_file()
    assert "numba" in result["modules"]  # the long-series path was taken
    assert "pandas" not in result["modules"]
