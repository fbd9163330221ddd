"""Names with digits that str.isdigit() accepts and int() refuses ('²'), from a red-team pass:
each was a ValueError traceback. They are names like any other now (model/plain_digits.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from tscope.ingest.checkpoints.param_order import ParamSpec, inferred_orders
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.model.plain_digits import is_plain_digits
from tscope.render.replay_names import _sort_step
from tscope.xray.trainer_run import find_run_files

TSCOPE = Path(sys.executable).with_name("tscope")
SUPERSCRIPT_TWO = "\u00b2"


def test_only_ascii_digits_are_plain_digits():
    assert is_plain_digits("0042")
    assert not is_plain_digits(SUPERSCRIPT_TWO)
    assert not is_plain_digits("")
    assert not is_plain_digits("-1")


def test_a_parameter_index_in_superscript_is_ordered_as_a_name():
    params = [ParamSpec(f"h.{index}.mlp.weight", (4, 4)) for index in ("10", SUPERSCRIPT_TWO, "2")]
    for _, order in inferred_orders(params):
        assert [p.name for p in order][:2] == ["h.2.mlp.weight", "h.10.mlp.weight"]


def test_a_superscript_step_is_no_step():
    assert step_value(SUPERSCRIPT_TWO) is None
    assert step_value("12") == 12
    assert _sort_step(SUPERSCRIPT_TWO) == (float("inf"), SUPERSCRIPT_TWO)
    assert _sort_step("3")[0] == 3.0


def test_xray_passes_over_a_checkpoint_folder_named_in_superscript(tmp_path):
    (tmp_path / f"checkpoint-{SUPERSCRIPT_TWO}").mkdir()
    (tmp_path / "checkpoint-5").mkdir()
    torch.save({"per_device_train_batch_size": 2}, tmp_path / "checkpoint-5" / "training_args.bin")
    arguments, _ = find_run_files(tmp_path)
    assert arguments == tmp_path / "checkpoint-5" / "training_args.bin"


def test_a_dcp_optimizer_group_keyed_in_superscript_is_analyzed(tmp_path):
    import torch.distributed.checkpoint as dcp

    checkpoint = tmp_path / "run" / "checkpoint-10" / "pytorch_model_fsdp_0"
    weight = torch.randn(4, 4)
    moments = {"exp_avg": torch.zeros(4, 4), "exp_avg_sq": torch.zeros(4, 4)}
    state = {
        "model": {"layer.weight": weight},
        "optim": {
            "state": {"layer.weight": {**moments, "step": torch.tensor(10.0)}},
            "param_groups": {
                "0": {"lr": 0.1, "weight_decay": 0.0},
                SUPERSCRIPT_TWO: {"lr": 0.2, "weight_decay": 0.0},
            },
        },
    }
    dcp.save(state, checkpoint_id=str(checkpoint), no_dist=True)
    out = tmp_path / "out"
    done = subprocess.run(
        [str(TSCOPE), "analyze", str(tmp_path / "run"), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "case.json").read_text())["checkpoints"]
