"""tscope.replay on the real Trainer fixture runs and the demo's nanoGPT-style run (CPU).

A replay must reproduce what the run logged — within the fidelity tolerance on the committed
fixtures (recorded on another CPU), bit for bit on a run trained on this machine (see
tests/any_cpu.py) — and say why when it does not.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from any_cpu import like_another_cpu, within_tolerance

from tscope.errors import UsageError
from tscope.model.replay import COMPARED, ReplayStep, StepComparison
from tscope.replay import StepContext, StepObserver, replay
from tscope.replay.diagnosis import ReplayConditions, likely_reasons
from tscope.replay.entry import load_entry
from tscope.replay.fidelity import logged_decimals, trainer_logged_loss
from tscope.replay.normaliser import trainer_rule

ROOT = Path(__file__).resolve().parents[1]
TRAINER_RUNS = ROOT / "fixtures/data/trainer"
FIXTURE_ENTRY = ROOT / "fixtures/entries/trainer_fixtures.py"
NANOGPT_ENTRY = ROOT / "examples/replay_entry_nanogpt.py"
REL_TOL = 1e-5  # the bar
DEMO_STEPS = 100  # the shortest demo run (tscope.demo.train.MIN_STEPS)

CONTRACT_KEYS = {"checkpoint", "steps", "fidelity", "per_step", "bad_samples", "interventions"}
FIDELITY_KEYS = {"compared_steps", "max_abs_loss_diff", "max_rel_loss_diff", "reproduced"}
STEP_KEYS = {"step", "loss", "grad_norm", "per_sample_loss", "layers"}


def fixture_replay(monkeypatch: pytest.MonkeyPatch, run: str, around: int, window: Any, **kw: Any):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", run)
    return replay(TRAINER_RUNS / run, around=around, window=window, entry=FIXTURE_ENTRY, **kw)


def trainer_log(run: str) -> dict[int, dict[str, Any]]:
    """log_history of the newest checkpoint (later processes win), by step."""
    state = json.loads((TRAINER_RUNS / run / "checkpoint-240/trainer_state.json").read_text())
    return {row["step"]: row for row in state["log_history"] if "loss" in row}


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """corrupted_batch around its planted step, watched for writes and leaked global state."""
    monkeypatch = pytest.MonkeyPatch()
    before = tree(TRAINER_RUNS / "corrupted_batch")
    threads = torch.get_num_threads()
    random.seed(5)
    torch.manual_seed(5)
    np.random.seed(5)
    rng = (random.getstate(), torch.random.get_rng_state(), np.random.get_state()[1].copy())
    result = fixture_replay(monkeypatch, "corrupted_batch", 145, (-5, 5))
    monkeypatch.undo()
    return {
        "result": result,
        "written": before != tree(TRAINER_RUNS / "corrupted_batch"),
        "threads": (threads, torch.get_num_threads()),
        "rng_kept": random.getstate() == rng[0]
        and torch.equal(torch.random.get_rng_state(), rng[1])
        and np.array_equal(np.random.get_state()[1], rng[2]),
    }


def assert_corrupted_batch_reproduced(result: Any) -> None:
    """What the replay of the committed corrupted_batch run must show on any CPU."""
    fidelity = result.fidelity
    assert result.checkpoint_path == "checkpoint-120"
    assert result.steps == (121, 150)
    assert fidelity.reproduced and fidelity.compared_steps == 30
    assert fidelity.max_rel_loss_diff <= REL_TOL and fidelity.max_rel_grad_norm_diff <= REL_TOL
    assert fidelity.grad_norm_reproduced
    assert 0 <= fidelity.bit_exact_steps <= 30  # reported apart: a property of the machine
    logged = trainer_log("corrupted_batch")
    by_step = {s.step: s for s in result.per_step}
    assert within_tolerance(by_step[145].loss, logged[145]["loss"])
    assert within_tolerance(by_step[145].grad_norm, logged[145]["grad_norm"])
    assert result.restore.optimizer and result.restore.scheduler and result.restore.rng


def test_corrupted_batch_replays_from_checkpoint_120_within_tolerance(corrupted):
    assert_corrupted_batch_reproduced(corrupted["result"])


def test_corrupted_batch_still_reproduces_when_replayed_as_on_another_cpu(monkeypatch):
    like_another_cpu(monkeypatch)
    result = fixture_replay(monkeypatch, "corrupted_batch", 145, (-5, 5))
    assert result.fidelity.bit_exact_steps < 30  # the perturbation is real: not bit for bit
    assert_corrupted_batch_reproduced(result)


def test_a_run_trained_on_this_machine_replays_bit_for_bit(monkeypatch, local_trainer_run):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", local_trainer_run.name)
    result = replay(
        local_trainer_run,
        around=22,
        window=(-5, 5),
        entry=FIXTURE_ENTRY,
        observers=[GradNormsByParameter()],
    )
    fidelity = result.fidelity
    assert result.checkpoint_path == "checkpoint-10" and result.steps == (11, 27)
    # Same machine, same kernels, one thread: not merely close, and an observer changes nothing.
    assert fidelity.reproduced and fidelity.bit_exact_steps == fidelity.compared_steps == 17
    assert fidelity.max_rel_loss_diff == 0.0 and fidelity.max_rel_grad_norm_diff == 0.0
    assert result.restore.optimizer and result.restore.scheduler and result.restore.rng


def test_per_sample_losses_of_the_corrupted_step_point_at_the_planted_rows(corrupted):
    manifest = json.loads((TRAINER_RUNS / "corrupted_batch/manifest.json").read_text())
    planted = sorted(manifest["planted"]["in_batch_indices"])
    step = next(s for s in corrupted["result"].per_step if s.step == 145)
    per_sample = np.array(step.per_sample_loss)
    assert per_sample.shape == (24,)
    assert abs(per_sample.mean() - step.loss) <= 1e-6 * step.loss  # their mean is the step loss
    assert sorted(np.argsort(per_sample)[-len(planted) :].tolist()) == planted


def test_replay_writes_nothing_and_gives_back_global_state(corrupted):
    assert not corrupted["written"]
    before, after = corrupted["threads"]
    assert before == after
    assert corrupted["rng_kept"]


def test_replay_json_holds_the_contract_keys(corrupted):
    payload = corrupted["result"].to_dict()
    assert payload.keys() >= CONTRACT_KEYS
    assert payload["checkpoint"] == {"step": 120, "path": "checkpoint-120", "format": "hf_trainer"}
    assert payload["steps"] == [121, 150]
    assert payload["fidelity"].keys() >= FIDELITY_KEYS
    assert all(row.keys() >= STEP_KEYS for row in payload["per_step"])
    assert payload["bad_samples"] == [] and payload["interventions"] == []
    json.dumps(payload, allow_nan=False)  # strict JSON


class GradNormsByParameter(StepObserver):
    """A per-layer statistic through the observer hook (what later per-layer stats plug into)."""

    def on_backward(self, context: StepContext) -> None:
        for name, parameter in context.model.named_parameters():
            if parameter.grad is not None:
                context.layers[name] = {"grad_norm": float(parameter.grad.norm())}


# The committed runs replayed as here and as on another CPU (weights moved by one rounding step):
# the assertions must hold on both, so they hold on whatever machine runs the tests.
ON_ANY_CPU = pytest.mark.parametrize("another_cpu", [False, True], ids=["this_cpu", "another_cpu"])


@ON_ANY_CPU
def test_lr_jump_replays_through_the_jump_with_an_observer_attached(monkeypatch, another_cpu):
    if another_cpu:
        like_another_cpu(monkeypatch)
    result = fixture_replay(
        monkeypatch, "lr_jump", 155, (-5, 5), observers=[GradNormsByParameter()]
    )
    fidelity = result.fidelity
    assert result.steps == (121, 160)
    assert fidelity.reproduced and fidelity.compared_steps == 40
    assert fidelity.max_rel_loss_diff <= REL_TOL
    assert result.restore.lr_source == "log"
    jumped = {s.step: s.learning_rate for s in result.per_step}
    assert jumped[150] > 40 * jumped[149]  # the planted x50 window is in the replayed rates
    layers = result.to_dict()["per_step"][0]["layers"]
    assert "transformer.wte.weight" in layers and "grad_norm" in layers["transformer.wte.weight"]


@ON_ANY_CPU
def test_resume_without_scheduler_pt_restores_neither_optimizer_nor_scheduler(
    monkeypatch, another_cpu
):
    if another_cpu:
        like_another_cpu(monkeypatch)
    result = fixture_replay(monkeypatch, "resumed_lr_restart", 130, (-5, 5))
    assert not result.restore.optimizer and not result.restore.scheduler
    assert any("no scheduler.pt" in note for note in result.restore.notes)
    assert result.per_step[0].learning_rate == 0.0  # the schedule restarted, as in the run
    assert result.fidelity.reproduced and result.fidelity.compared_steps == 15
    assert result.fidelity.max_rel_loss_diff <= REL_TOL


def test_logging_every_5_steps_compares_window_means(monkeypatch):
    result = fixture_replay(monkeypatch, "stable_long_logging", 190, (-5, 5))
    fidelity = result.fidelity
    assert result.steps == (181, 195)
    assert fidelity.logging_window == 5
    assert [c.window for c in result.comparisons] == [(181, 185), (186, 190), (191, 195)]
    assert fidelity.reproduced and fidelity.max_rel_loss_diff <= REL_TOL
    assert result.restore.lr_source == "scheduler"  # the LR is logged every 5th step only


def test_batches_shifted_by_one_step_do_not_reproduce_and_say_why(monkeypatch, tmp_path):
    shifted = tmp_path / "shifted_entry.py"
    shifted.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('fixture_entry', {str(FIXTURE_ENTRY)!r})\n"
        "base = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(base)\n"
        "def batches(start_step):\n"
        "    return base.batches(start_step + 1)\n"
    )
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
    result = replay(TRAINER_RUNS / "corrupted_batch", around=125, window=(-4, 0), entry=shifted)
    fidelity = result.fidelity
    assert not fidelity.reproduced
    assert fidelity.first_mismatch_step == 121
    assert fidelity.reasons[0].code == "data_order"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tscope.demo.train import make_demo_run

    return make_demo_run(tmp_path_factory.mktemp("demo") / "run", steps=DEMO_STEPS).run_dir


def test_nanogpt_style_demo_run_replays_with_its_own_model_and_loss(demo_run):
    result = replay(demo_run, around=52, window=(-3, 3), entry=NANOGPT_ENTRY)
    assert result.checkpoint_format == "nanogpt"
    assert result.checkpoint_path == "ckpt_000047.pt" and result.steps == (47, 55)
    assert result.restore.loss_path == "entry_loss_fn" and result.restore.optimizer
    assert result.fidelity.reproduced
    # train.log rounds to 4 decimals; metrics.jsonl holds the losses at full precision.
    logged = {
        row["step"]: row
        for row in map(json.loads, (demo_run / "metrics.jsonl").read_text().splitlines())
        if "train/loss" in row
    }
    for step in result.per_step:
        row = logged[step.step]
        assert abs(step.loss - row["train/loss"]) <= REL_TOL * row["train/loss"]
        assert abs(step.grad_norm - row["train/grad_norm"]) <= REL_TOL * row["train/grad_norm"]
        assert len(step.per_sample_loss) == 16


def test_a_missing_or_broken_entry_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "nope.py"
    no_batches = tmp_path / "no_batches.py"
    no_batches.write_text("def build_model(config):\n    return None\n")
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    for entry in (missing, no_batches, broken):
        with pytest.raises(UsageError) as error:
            load_entry(entry)
        message = str(error.value)
        assert str(entry) in message and "\n" not in message


def test_replay_needs_an_entry_file():
    with pytest.raises(UsageError, match="entry file"):
        replay(TRAINER_RUNS / "corrupted_batch", around=145)


def test_no_checkpoint_before_the_window_lists_the_checkpoint_steps(monkeypatch):
    with pytest.raises(UsageError) as error:
        fixture_replay(monkeypatch, "corrupted_batch", 50, (-5, 5))
    message = str(error.value)
    assert "60, 120, 180, 240" in message and "\n" not in message


def test_loss_fn_gets_only_the_keywords_it_declares(tmp_path):
    entry = tmp_path / "entry.py"
    entry.write_text(
        "def batches(start_step):\n    yield from ()\n"
        "def loss_fn(model, batch, num_samples=None):\n    return None\n"
    )
    assert load_entry(entry).loss_keywords == ("num_samples",)


def _step(step: int, *micro: float) -> ReplayStep:
    return ReplayStep(
        step=step, loss=sum(micro), grad_norm=1.0, learning_rate=1e-3, micro_losses=micro
    )


def test_trainer_log_filter_replaces_a_nan_by_the_running_mean():
    window = [_step(1, 2.0), _step(2, math.nan), _step(3, 4.0)]
    # float32: 2 -> 2 + 2/2 = 3 -> 7, over 3 steps
    assert trainer_logged_loss(window, nan_filter=True) == pytest.approx(7.0 / 3)
    assert trainer_logged_loss([_step(1, math.nan)], nan_filter=True) == 0.0
    assert math.isnan(trainer_logged_loss(window, nan_filter=False))


def test_logged_decimals_recognises_a_rounded_log():
    assert logged_decimals([4.538, 4.5662, 4.5298, 4.4259]) == 4
    assert logged_decimals([4.467222595214844, 4.361029434204101, 4.1709846496582035]) is None


class _LossKwargsModel(torch.nn.Module):
    def __init__(self, loss_type: str | None) -> None:
        super().__init__()
        self.loss_type = loss_type

    def forward(self, **kwargs: Any) -> None:
        return None


def test_trainer_token_count_follows_the_producers_transformers_version():
    causal = _LossKwargsModel("ForCausalLM")
    assert not trainer_rule(causal, "4.57.1", None).counts_shifted
    assert trainer_rule(causal, "5.24.0", None).counts_shifted
    unverified = trainer_rule(causal, "5.10.0", None)
    assert unverified.counts_shifted and unverified.caveat
    assert not trainer_rule(_LossKwargsModel(None), "5.24.0", None).counts_shifted  # GPT-2
    assert not trainer_rule(causal, "5.24.0", False).counts_shifted  # the entry's override


def test_the_fixture_entry_refuses_to_guess_the_run(monkeypatch):
    monkeypatch.delenv("TSCOPE_FIXTURE_RUN", raising=False)
    with pytest.raises(UsageError) as error:
        load_entry(FIXTURE_ENTRY)
    assert "TSCOPE_FIXTURE_RUN" in str(error.value) and str(FIXTURE_ENTRY) in str(error.value)


def _comparison(step: int, rel: float) -> StepComparison:
    return StepComparison(step, (step, step), COMPARED, 3.0, 3.0 * (1 + rel), 3.0 * rel, rel)


def test_a_replay_that_matches_then_drifts_is_told_apart_from_other_data():
    conditions = ReplayConditions(
        optimizer_restored=True,
        rng_restored=True,
        deterministic=True,
        device_type="cuda",
        producer_device="cpu",
        lr_source="log",
    )
    steps = [_step(s, 3.0) for s in (1, 2, 3)]
    drifting = [_comparison(1, 0.0), _comparison(2, 1e-7), _comparison(3, 2e-4)]
    codes = [r.code for r in likely_reasons(drifting, 3, conditions, steps)]
    assert codes == ["different_kernels", "numerical_drift"]
    rounding = [_comparison(1, 2e-5)]
    codes = [r.code for r in likely_reasons(rounding, 1, conditions, steps)]
    assert codes == ["different_kernels", "first_step_rounding"]
    other_data = [_comparison(1, 4e-2)]
    assert likely_reasons(other_data, 1, conditions, steps)[0].code == "data_order"
