"""A run in stock nanoGPT's RNG order (no RNG state in its ckpt.pt), LR ×30 planted at 31-32,
trained here: with the seed-stream entry helper the replay reproduces it and names the cause;
the same entry drawing from whatever the global RNG holds does not reproduce and names none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tscope.replay.seed_stream import NanoGPTDraws, nanogpt_batches, rebuildable

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "fixtures" / "entries" / "stock_nanogpt.py"

SPIKE = 33  # the first loss after the ×30 updates of 31 and 32


@pytest.fixture(scope="module")
def stock_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if str(ROOT / "fixtures") not in sys.path:  # at run time only, never at collection
        sys.path.append(str(ROOT / "fixtures"))
    from stock_nanogpt_run import train_stock_run

    return train_stock_run(tmp_path_factory.mktemp("stock") / "run")


def _investigate(run: Path, what_ifs: list[str]):  # type: ignore[no-untyped-def]
    from tscope.replay_pipeline import investigate

    return investigate(run, SPIKE, ENTRY, window=(-3, 3), what_ifs=what_ifs, statistics=False)


def test_with_the_helper_the_replay_reproduces_and_names_the_state(stock_run):
    result = _investigate(stock_run, ["skip", "lr=0.05"]).result
    assert result.fidelity.reproduced
    assert result.fidelity.max_rel_loss_diff < 1e-5
    effects = {o.name: o.effect for o in result.interventions}
    assert effects == {"skip": "kept", "lr": "removed"}
    assert result.cause == "state"


def test_without_it_the_replay_does_not_reproduce_and_names_no_cause(stock_run, monkeypatch):
    monkeypatch.setenv("TSCOPE_STOCK_NO_HELPER", "1")
    result = _investigate(stock_run, ["lr=0.05"]).result
    assert not result.fidelity.reproduced
    assert result.fidelity.reasons[0].code == "data_order"
    assert result.cause is None
    assert all(not o.conclusive for o in result.interventions)


def test_the_stream_is_the_one_train_py_drew():
    import torch

    def get_batch(split: str) -> torch.Tensor:
        return torch.randint(1000, (2,))

    draws = NanoGPTDraws(seed=5, gradient_accumulation_steps=2, eval_interval=3, eval_iters=2)
    torch.manual_seed(5)
    expected = []
    pending = get_batch("train")
    for iter_num in range(6):  # train.py's order: eval at 0 and 3, prefetch after each forward
        if iter_num % 3 == 0:
            [get_batch(s) for s in ("train", "val") for _ in range(2)]
        second, pending_next = get_batch("train"), get_batch("train")
        expected.append([pending, second])
        pending = pending_next
    stream = nanogpt_batches(draws, 3, get_batch)
    for iter_num in (4, 5):
        got = next(stream)
        assert all(torch.equal(a, b) for a, b in zip(got, expected[iter_num], strict=True))


def test_it_says_when_the_stream_cannot_be_rebuilt():
    assert rebuildable({"dropout": 0.0, "device": "cpu"})[0]
    possible, why = rebuildable({"dropout": 0.1, "device": "cpu"})
    assert not possible and "same global generator" in why
    possible, why = rebuildable({"dropout": 0.1, "device": "cuda"})
    assert possible and "masks are not" in why
    assert not rebuildable({"init_from": "gpt2-xl"})[0]
