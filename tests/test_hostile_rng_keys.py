"""RNG state files whose dict keys are crafted objects: every key is described in bounded text.

accelerate's random_states_{rank}.pkl is a dict the file's author chose. `str(key)` of a tuple
repeating one tensor 300,000 times (a 615 KB file) ran torch's tensor repr for over a minute,
and a 100,000-character key went verbatim into the `partial` line (a 104 KB case.json).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import tscope
from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.rng_state import check_rng_state
from tscope.model import PartialInput

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
RNG_FILE = "step_2/random_states_0.pkl"
# A partial line names the file and says what is wrong in one short sentence.
MAX_PROBLEM_CHARS = 300


def _run_with_rng_key(tmp_path: Path, key: object) -> list[PartialInput]:
    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / "accelerate_lr_jump", run)
    state = torch.load(run / RNG_FILE, weights_only=False)  # the fixture: trusted
    state[key] = torch.zeros(3)
    torch.save(state, run / RNG_FILE)
    case = tscope.analyze(run)
    return [p for p in case.partial if p.path == RNG_FILE]


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(tuple([torch.zeros(3)] * 2000), id="tuple-of-one-tensor-repeated"),
        pytest.param(("a" * 100_000,), id="tuple-of-a-long-string"),
        pytest.param("b" * 100_000, id="long-string"),
        pytest.param(torch.zeros(3), id="tensor"),
    ],
)
def test_a_crafted_rng_key_is_one_short_partial_line(tmp_path: Path, key: object) -> None:
    entries = _run_with_rng_key(tmp_path, key)
    assert len(entries) == 1, entries
    problem = entries[0].problem
    assert "is not a generator state" in problem
    assert len(problem) <= MAX_PROBLEM_CHARS, problem[:500]
    assert "tensor(" not in problem and "aaaaaaaaaa" * 10 not in problem


def test_a_trainer_rng_state_with_a_crafted_key_is_refused_in_bounded_text() -> None:
    state = {
        ("a" * 100_000,): torch.zeros(3),
        tuple([torch.zeros(3)] * 2000): torch.zeros(3),
        "c" * 100_000: torch.zeros(3),
    }
    with pytest.raises(UnreadableInput) as raised:
        check_rng_state(state, "checkpoint-1/rng_state.pth")
    problem = raised.value.problem
    assert len(problem) <= MAX_PROBLEM_CHARS, problem[:500]
    assert "<tuple>" in problem and "tensor(" not in problem
