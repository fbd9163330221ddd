"""All statistics of a step reach the host in one transfer (one device sync per step), with the
very numbers each observer's own transfer gives. Counted on CPU through a hook on the tensor
methods that wait for the device (.tolist, .item, .cpu, float()); no GPU was used."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from test_replay_stats import built, gpt2, make_batches, mixtral, replay_steps

from tscope.replay.stats import statistics_observers
from tscope.replay.stats.base import HostTransfer
from tscope.replay.suite import StatisticsSuite

STEPS = 3
SYNCING = ("tolist", "item", "cpu", "__float__")


@contextmanager
def counted_syncs() -> Iterator[dict[str, int]]:
    """Count calls of the tensor methods that copy to the host (a device sync on a GPU)."""
    counts = dict.fromkeys(SYNCING, 0)
    originals = {name: getattr(torch.Tensor, name) for name in SYNCING}

    def counting(name: str) -> Any:
        original = originals[name]

        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(self, *args, **kwargs)

        return method

    for name in SYNCING:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _layers(records: list[Any]) -> str:
    """Every step's layers as text: values and key order both compared (NaN as text)."""
    return json.dumps([r.layers for r in records], allow_nan=True)


@pytest.mark.parametrize("factory", [gpt2, mixtral], ids=["gpt2", "mixtral"])
def test_one_transfer_gives_each_observer_s_own_numbers(factory):
    alone = replay_steps(built(factory), statistics_observers(built(factory)), steps=STEPS)
    suite = StatisticsSuite()
    merged = replay_steps(built(factory), [suite], steps=STEPS)
    assert len(suite.observers) >= 5
    assert _layers(merged) == _layers(alone)
    assert [r.loss for r in merged] == [r.loss for r in alone]
    assert suite.host.transfers == STEPS


def test_the_statistics_cost_one_sync_per_step_where_each_observer_cost_one():
    batches = make_batches()
    with counted_syncs() as bare:
        replay_steps(built(gpt2), [], batches, steps=STEPS)
    observers = statistics_observers(built(gpt2))
    with counted_syncs() as alone:
        replay_steps(built(gpt2), observers, batches, steps=STEPS)
    with counted_syncs() as merged:
        replay_steps(built(gpt2), [StatisticsSuite()], batches, steps=STEPS)
    base = sum(bare.values())
    assert sum(alone.values()) - base == len(observers) * STEPS  # one .tolist() per observer
    assert sum(merged.values()) - base == STEPS  # one .tolist() per step for all of them
    assert merged["tolist"] - bare["tolist"] == STEPS


def test_the_transfer_returns_every_dtype_as_its_own_tolist():
    tensors = [
        torch.tensor([1.5, float("nan"), -float("inf"), 3.4028234663852886e38]),
        torch.tensor([[0.1, 0.2]], dtype=torch.float64),
        torch.tensor([True, False]),
        torch.tensor([2**40, -3]),
        torch.tensor([0.333], dtype=torch.bfloat16),
        torch.tensor(7.25),
    ]
    got: list[Any] = []
    transfer = HostTransfer()
    for tensor in tensors:
        transfer.request(tensor, got.append)
    transfer.run()
    assert transfer.transfers == 1
    for tensor, value in zip(tensors, got, strict=True):
        expected = tensor.tolist()
        assert type(value) is type(expected)
        assert json.dumps(value) == json.dumps(expected)
    assert math.isnan(got[0][1])
