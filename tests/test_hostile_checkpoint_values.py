"""Checkpoint values of the wrong kind (red-team pass of session 25). Each file is a plain
torch.save of dicts, tensors, text and numbers, loadable with weights_only=True: no pickle trick,
only a value where another kind belongs. Each was a traceback; now the value is ignored, the
file still analyzed, and the case says what was ignored."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import tscope
from tscope.pipeline import analyze_run


def nanogpt_checkpoint() -> dict[str, Any]:
    torch.manual_seed(0)
    model = {
        "transformer.wte.weight": torch.randn(8, 4),
        "transformer.h.0.mlp.weight": torch.randn(4, 4),
        "transformer.h.0.ln.weight": torch.ones(4),
    }
    state = {
        index: {
            "step": torch.tensor(100.0),
            "exp_avg": torch.randn_like(tensor) * 1e-3,
            "exp_avg_sq": torch.rand_like(tensor) * 1e-6,
        }
        for index, tensor in enumerate(model.values())
    }
    groups = [
        {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "params": [0, 1]},
        {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0, "params": [2]},
    ]
    return {
        "model": model,
        "optimizer": {"state": state, "param_groups": groups},
        "model_args": {"n_layer": 1, "n_embd": 4},
        "iter_num": 100,
        "config": {"learning_rate": 1e-3},
    }


def _state(checkpoint: dict[str, Any], index: int) -> dict[str, Any]:
    return checkpoint["optimizer"]["state"][index]


def _group(checkpoint: dict[str, Any], index: int) -> dict[str, Any]:
    return checkpoint["optimizer"]["param_groups"][index]


EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str | None]] = {
    "step_text": (lambda c: _state(c, 1).update(step="abc"), "step counter is not a step"),
    "step_two_values": (
        lambda c: _state(c, 1).update(step=torch.tensor([1.0, 2.0])),
        "step counter is not a step",
    ),
    "step_int64_min": (lambda c: _state(c, 1).update(step=-(2**63)), "step counter is not a step"),
    "moment_text": (
        lambda c: _state(c, 0).update(exp_avg_sq="abc"),
        "`exp_avg_sq` is not an array",
    ),
    "betas_number": (lambda c: _group(c, 0).update(betas=0.9), None),
    "betas_dict": (lambda c: _group(c, 0).update(betas={"a": 1, "b": 2}), None),
    "betas_huge": (lambda c: _group(c, 0).update(betas=(1e300, -0.5)), None),
    "lr_two_values": (lambda c: _group(c, 0).update(lr=torch.tensor([1e-3, 2e-3])), None),
    "group_not_a_dict": (lambda c: c["optimizer"]["param_groups"].__setitem__(1, 7), None),
    "config_number": (lambda c: c.update(config=float("nan")), "`config` is a float"),
    "model_args_list": (lambda c: c.update(model_args=[1, "a", None]), "`model_args` is a list"),
}


@pytest.mark.parametrize("variant", sorted(EDITS))
def test_a_checkpoint_value_of_the_wrong_kind_is_ignored_and_said(tmp_path, variant):
    edit, said = EDITS[variant]
    checkpoint = nanogpt_checkpoint()
    edit(checkpoint)
    torch.save(checkpoint, tmp_path / "ckpt_000100.pt")
    case, _ = analyze_run(str(tmp_path))
    assert [c.step for c in case.checkpoints] == [100]
    if said is not None:
        assert any(said in entry.problem for entry in case.partial), case.partial


LIGHTNING_CHECKPOINT = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "data"
    / "layouts"
    / "lightning_named_groups"
    / "epoch=0-step=2.ckpt"
)
LIGHTNING_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "param_names_bool": lambda groups: groups[0]["param_names"].__setitem__(2, True),
    "params_int": lambda groups: groups[0].update(params=-1),
    "param_names_dict": lambda groups: groups[1]["param_names"].__setitem__(3, {}),
}


@pytest.mark.parametrize("variant", sorted(LIGHTNING_EDITS))
def test_a_lightning_param_group_of_the_wrong_kind_is_analyzed(tmp_path, variant):
    # A real Lightning checkpoint (fixtures/make_checkpoint_layouts.py), one group entry forged.
    checkpoint = torch.load(LIGHTNING_CHECKPOINT, weights_only=True)
    LIGHTNING_EDITS[variant](checkpoint["optimizer_states"][0]["param_groups"])
    torch.save(checkpoint, tmp_path / LIGHTNING_CHECKPOINT.name)
    case, _ = analyze_run(str(tmp_path))
    assert [c.step for c in case.checkpoints] == [2]


@pytest.mark.parametrize("kind", ["meta", "sparse_coo", "sparse_csr", "quantized"])
def test_tensors_without_dense_data_are_a_partial_entry(tmp_path: Path, kind: str) -> None:
    """weights_only admits meta, sparse and quantized tensors; the statistics cannot read them (a
    meta tensor claimed 10^12 elements with no data; sparse ones have no strided storage): each
    was a traceback, exit 1 (red team, session 27). Now the file is refused in one line, the
    logs are still analyzed, and the refused file is no restart point."""
    unusual = {
        "meta": lambda: torch.empty(10**6, 10**6, device="meta"),
        "sparse_coo": lambda: torch.sparse_coo_tensor(
            torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), size=(10**6, 10**6)
        ),
        "sparse_csr": lambda: torch.sparse_csr_tensor(
            torch.zeros(1001, dtype=torch.long),
            torch.zeros(0, dtype=torch.long),
            torch.zeros(0),
            size=(1000, 10**9),
        ),
        "quantized": lambda: torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8),
    }[kind]()
    state = {"transformer.wte.weight": torch.randn(8, 4), "transformer.h.0.w": unusual}
    torch.save(
        {
            "model": state,
            "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]},
            "iter_num": 100,
            "model_args": {},
            "config": {},
        },
        tmp_path / "ckpt.pt",
    )
    lines = [
        f"iter {i}: loss {3 - i * 0.001 + 0.02 * math.sin(i):.4f}, time 10.0ms" for i in range(200)
    ]
    lines[150] = "iter 150: loss 9.0000, time 10.0ms"
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    case = tscope.analyze(tmp_path)
    (entry,) = [p for p in case.partial if p.path == "ckpt.pt"]
    assert "transformer.h.0.w" in entry.problem and "dense tensors" in entry.problem
    assert case.summary.card is None or case.summary.card.restart is None
