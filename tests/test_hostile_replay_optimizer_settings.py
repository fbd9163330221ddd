"""A crafted optimizer.pt for `tscope replay`: its group settings refused in one line.

lr "abc" raised ValueError from float(), lr -1.0 torch's "Invalid learning rate", betas (0.9,) a
ValueError at the first optimizer step, fused and foreach both set a RuntimeError from AdamW.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tscope.errors import UnreadableInput
from tscope.replay.optimizer_build import build_optimizer


def _saved_adamw(**group_changes: Any) -> tuple[torch.nn.Module, dict[str, Any]]:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    saved = optimizer.state_dict()
    saved["param_groups"][0].update(group_changes)
    return model, saved


def _build(model: torch.nn.Module, saved: dict[str, Any]) -> Any:
    facts = SimpleNamespace(resumes_optimizer_with_scheduler=False, parameter_groups="nanogpt")
    files = SimpleNamespace(
        optimizer_state=lambda: saved,
        optimizer_file=lambda: "optimizer.pt",
        run_config={},
        choice=SimpleNamespace(shown="checkpoint-10", facts=facts),
    )
    return build_optimizer(model, files, SimpleNamespace(build_optimizer=None))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"lr": -1.0}, "lr is -1.0, not a number >= 0"),
        ({"lr": "abc"}, "lr is abc, not a number >= 0"),
        ({"lr": "0.001"}, "lr is 0.001, not a number >= 0"),
        ({"eps": float("nan")}, "eps is nan"),
        ({"betas": (0.9,)}, "betas is (0.9,), not a pair"),
        ({"betas": (0.9, 1.5)}, "not in [0, 1)"),
        ({"fused": True, "foreach": True}, "its saved AdamW settings are not valid"),
    ],
)
def test_a_crafted_group_setting_is_one_line_naming_the_file(changes, fragment):
    model, saved = _saved_adamw(**changes)
    with pytest.raises(UnreadableInput) as caught:
        _build(model, saved)
    assert caught.value.path == "checkpoint-10/optimizer.pt"
    assert fragment in caught.value.problem
    assert "\n" not in str(caught.value)


def test_a_plain_saved_adamw_still_builds():
    model, saved = _saved_adamw()
    built = _build(model, saved)
    assert built.checkpoint_group_lrs == [1e-3]
    assert built.restored


def _with_state(edit: Any) -> tuple[torch.nn.Module, dict[str, Any]]:
    model, saved = _saved_adamw()
    edit(saved)
    return model, saved


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda s: s["state"][0].update(step=None), "parameter 0's step counter is None"),
        (lambda s: s["state"][0].update(step=-(2**63)), "step counter is -9223372036854775808"),
        (lambda s: s["state"][0].update(exp_avg_sq=(1, 2)), "exp_avg_sq is a tuple, not a tensor"),
        (lambda s: s["state"].update({1: 1e-300}), "the state of parameter 1 is a float"),
        (lambda s: s["param_groups"][0]["params"].__setitem__(1, {"a": 1}), "not a list of"),
    ],
)
def test_a_crafted_parameter_state_is_one_line_naming_the_file(edit, fragment):
    # Red team, session 25: each was a traceback from load_state_dict or the first step.
    model, saved = _with_state(edit)
    with pytest.raises(UnreadableInput) as caught:
        _build(model, saved)
    assert fragment in caught.value.problem
    assert "\n" not in str(caught.value)


def test_a_capturable_adamw_steps_eagerly_on_cpu():
    # A checkpoint saved for CUDA graphs: torch asserts capturable parameters are on CUDA.
    model, saved = _saved_adamw(capturable=True)
    built = _build(model, saved)
    model(torch.ones(1, 2)).sum().backward()
    built.optimizer.step()
    assert any("stepped eagerly on CPU" in note for note in built.notes)
