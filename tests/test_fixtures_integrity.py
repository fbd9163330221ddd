"""Sanity checks of the committed Trainer fixture runs (fixtures/data/trainer/), not of tscope.

Each planted cause must be where its manifest says, visible in what the Trainer wrote, and the
controls must be clean; otherwise every detector test built on these runs proves nothing.
Regenerate with `.venv/bin/python fixtures/make_trainer_runs.py`.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

TRAINER_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
RUN_NAMES = (
    "stable",
    "corrupted_batch",
    "lr_jump",
    "lr_blowup",
    "resumed_lr_restart",
    "stable_long_logging",
)
CHECKPOINT_FILES = (
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
    "config.json",
    "training_args.bin",
)
# A planted spike must stand this many robust sigmas above the 20 steps before it; the stable
# control's largest excursion is about 3.6 sigma, the planted ones 15-20.
SPIKE_SIGMAS = 8.0
CONTROL_MAX_SIGMAS = 6.0
BASELINE_WINDOW_STEPS = 20
MAX_FIXTURE_BYTES = 6_500_000  # the budget all committed runs share (7 runs: 6.03 MB)


def manifest_of(run: str) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(
        (TRAINER_RUNS / run / "manifest.json").read_text(encoding="utf-8")
    )
    return manifest


def trainer_state(run: str, checkpoint: str | None = None) -> dict[str, Any]:
    checkpoint = checkpoint or manifest_of(run)["checkpoints"][-1]
    path = TRAINER_RUNS / run / checkpoint / "trainer_state.json"
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))  # NaN -> float("nan")
    return state


def training_rows(run: str, checkpoint: str | None = None) -> dict[int, dict[str, Any]]:
    """log_history training rows by step (the final summary row has no "loss")."""
    log = trainer_state(run, checkpoint)["log_history"]
    return {row["step"]: row for row in log if "loss" in row}


def losses(run: str) -> dict[int, float]:
    return {step: row["loss"] for step, row in training_rows(run).items()}


def robust_sigmas_above_baseline(loss_by_step: dict[int, float], step: int) -> float:
    """(loss - median) / (1.4826 * MAD) over the BASELINE_WINDOW_STEPS steps before `step`."""
    previous = [loss_by_step[s] for s in range(step - BASELINE_WINDOW_STEPS, step)]
    median = statistics.median(previous)
    mad_sigma = 1.4826 * statistics.median(abs(value - median) for value in previous)
    return (loss_by_step[step] - median) / mad_sigma


def scalar_events(event_file: Path, tag: str) -> dict[int, float]:
    accumulator_module = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    accumulator = accumulator_module.EventAccumulator(
        str(event_file), size_guidance={accumulator_module.SCALARS: 0}
    )
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars(tag)}


# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", RUN_NAMES)
def test_run_directory_has_the_trainer_output_layout(run: str) -> None:
    run_dir = TRAINER_RUNS / run
    manifest = manifest_of(run)
    assert manifest["run"] == run
    on_disk = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    assert sorted(manifest["checkpoints"]) == on_disk
    assert 2 <= len(on_disk) <= 4
    deleted = set((manifest["planted"] or {}).get("deleted_files", []))
    for checkpoint in manifest["checkpoints"]:
        for name in CHECKPOINT_FILES:
            expected = f"{checkpoint}/{name}" not in deleted
            assert (run_dir / checkpoint / name).is_file() == expected, f"{run}/{checkpoint}/{name}"
        state = trainer_state(run, checkpoint)
        assert state["global_step"] == int(checkpoint.split("-")[1])
        assert state["logging_steps"] == manifest["training"]["logging_steps"]
    event_files = sorted((run_dir / "runs").glob("events.out.tfevents.*"))
    expected_event_files = [
        name for names in manifest["tensorboard_event_files_by_phase"].values() for name in names
    ]
    assert [p.name for p in event_files] == sorted(expected_event_files)


@pytest.mark.parametrize("run", RUN_NAMES)
def test_every_step_is_logged_once_in_the_final_trainer_state(run: str) -> None:
    manifest = manifest_of(run)
    every = manifest["training"]["logging_steps"]
    max_steps = manifest["training"]["max_steps"]
    assert sorted(training_rows(run)) == list(range(every, max_steps + 1, every))


@pytest.mark.parametrize("run", RUN_NAMES)
def test_tensorboard_holds_the_trainer_tags(run: str) -> None:
    event_file = sorted((TRAINER_RUNS / run / "runs").glob("events.out.tfevents.*"))[-1]
    loss_events = scalar_events(event_file, "train/loss")
    assert loss_events
    rows = training_rows(run)
    for step, value in loss_events.items():
        assert value == pytest.approx(rows[step]["loss"], rel=1e-6, abs=1e-6)
    assert scalar_events(event_file, "train/learning_rate")
    assert scalar_events(event_file, "train/grad_norm")


def test_all_runs_fit_the_size_budget() -> None:
    total = sum(p.stat().st_size for p in TRAINER_RUNS.rglob("*") if p.is_file())
    assert total < MAX_FIXTURE_BYTES


# ---------------------------------------------------------------------------------------------
# Controls
# ---------------------------------------------------------------------------------------------


def test_stable_learns_and_has_no_spike() -> None:
    loss_by_step = losses("stable")
    assert manifest_of("stable")["planted_cause"] is None
    early = statistics.median(loss_by_step[s] for s in range(1, 11))
    late = statistics.median(loss_by_step[s] for s in range(221, 241))
    assert late < early - 1.0  # 4.5 -> 2.8 nats per character
    worst = max(robust_sigmas_above_baseline(loss_by_step, s) for s in range(41, 241))
    assert worst < CONTROL_MAX_SIGMAS


def test_stable_long_logging_logs_five_step_means_of_the_same_training() -> None:
    per_step = training_rows("stable")
    every_fifth = training_rows("stable_long_logging")
    assert manifest_of("stable_long_logging")["training"]["logging_steps"] == 5
    for step, row in every_fifth.items():
        window_mean = sum(per_step[s]["loss"] for s in range(step - 4, step + 1)) / 5
        assert row["loss"] == pytest.approx(window_mean, rel=1e-5)
        assert row["grad_norm"] == per_step[step]["grad_norm"]  # the fifth step's, not a mean
        assert row["learning_rate"] == per_step[step]["learning_rate"]


# ---------------------------------------------------------------------------------------------
# Planted causes
# ---------------------------------------------------------------------------------------------


def test_corrupted_batch_spikes_at_its_step_and_recovers() -> None:
    planted = manifest_of("corrupted_batch")["planted"]
    step = planted["step"]
    loss_by_step = losses("corrupted_batch")
    assert robust_sigmas_above_baseline(loss_by_step, step) > SPIKE_SIGMAS
    assert loss_by_step[step] == max(loss_by_step[s] for s in range(41, 241))
    assert robust_sigmas_above_baseline(loss_by_step, step + 1) < 3.0


def test_corrupted_batch_names_samples_that_were_in_that_batch() -> None:
    manifest = manifest_of("corrupted_batch")
    planted = manifest["planted"]
    batch = manifest["phases"][0]["batch_sample_ids"][planted["step"] - 1]
    batch_size = manifest["training"]["per_device_train_batch_size"]
    assert len(batch) == batch_size
    assert planted["in_batch_indices"] and all(
        0 <= i < batch_size for i in planted["in_batch_indices"]
    )
    assert planted["dataset_sample_ids_replaced"] == [batch[i] for i in planted["in_batch_indices"]]
    assert sorted(planted["replacement_token_ids"]) == sorted(map(str, planted["in_batch_indices"]))


@pytest.mark.parametrize("run", ["corrupted_batch", "lr_jump", "resumed_lr_restart"])
def test_planted_run_equals_stable_before_its_step(run: str) -> None:
    """Same seed, same data order: the control is the counterfactual of the planted run."""
    step = manifest_of(run)["planted"]["step"]
    stable, planted = training_rows("stable"), training_rows(run)
    assert all(stable[s] == planted[s] for s in range(1, step))
    assert planted[step] != stable[step]


@pytest.mark.parametrize("run", RUN_NAMES)
def test_every_run_consumed_the_same_batches_as_stable(run: str) -> None:
    stable_batches = manifest_of("stable")["phases"][0]["batch_sample_ids"]
    for phase in manifest_of(run)["phases"]:
        expected = stable_batches[phase["first_step"] - 1 : phase["last_step"]]
        assert phase["batch_sample_ids"] == expected, phase["phase"]


def test_lr_jump_logs_the_raised_lr_and_the_loss_spikes_after_it() -> None:
    planted = manifest_of("lr_jump")["planted"]
    first, last, factor = planted["first_step"], planted["last_step"], planted["factor"]
    rows = training_rows("lr_jump")
    stable_rows = training_rows("stable")
    for step in range(first, last + 1):
        ratio = rows[step]["learning_rate"] / stable_rows[step]["learning_rate"]
        assert ratio == pytest.approx(factor, rel=1e-6)
    assert rows[last + 1]["learning_rate"] == pytest.approx(stable_rows[last + 1]["learning_rate"])
    loss_by_step = losses("lr_jump")
    # The loss of step k is computed before step k's update: the spike starts at first + 1.
    assert robust_sigmas_above_baseline(loss_by_step, first) < 3.0
    assert robust_sigmas_above_baseline(loss_by_step, first + 1) > SPIKE_SIGMAS
    peak_step = max(range(41, 241), key=loss_by_step.__getitem__)
    assert first + 1 <= peak_step <= last + 1
    assert all(stable_rows[s]["loss"] == loss_by_step[s] for s in range(1, first + 1))


def test_lr_blowup_diverges_far_above_its_early_baseline_then_turns_nonfinite() -> None:
    planted = manifest_of("lr_blowup")["planted"]
    rows = training_rows("lr_blowup")
    first_nan = planted["observed_first_nonfinite_grad_norm_step"]
    assert first_nan is not None and planted["step"] < first_nan < 240
    baseline = statistics.median(rows[s]["loss"] for s in range(25, planted["step"]))
    before_nan = [rows[s]["loss"] for s in range(first_nan - 20, first_nan + 1)]
    assert all(loss > 2 * baseline for loss in before_nan)  # sustained, not a spike
    assert max(before_nan) > 100 * baseline
    # logging_nan_inf_filter=True (the default): a NaN step's loss is logged as the running mean,
    # which is 0.0 with logging_steps=1; grad_norm shows the NaN.
    for step in range(first_nan + 1, 241):
        assert rows[step]["loss"] == 0.0
        assert math.isnan(rows[step]["grad_norm"])
    lrs = [rows[s]["learning_rate"] for s in range(planted["step"], 241)]
    assert all(b > a for a, b in itertools.pairwise(lrs))


def test_lr_blowup_final_weights_are_nonfinite_and_the_diverging_ones_finite() -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch = pytest.importorskip("torch")

    def all_finite(checkpoint: str) -> bool:
        path = TRAINER_RUNS / "lr_blowup" / checkpoint / "model.safetensors"
        return all(
            bool(torch.isfinite(t).all()) for t in safetensors_torch.load_file(path).values()
        )

    assert all_finite("checkpoint-180")
    assert not all_finite("checkpoint-240")


def test_resumed_run_relogs_steps_in_a_second_event_file_with_a_restarted_lr() -> None:
    manifest = manifest_of("resumed_lr_restart")
    planted = manifest["planted"]
    resume_step, crash_step = planted["resume_step"], planted["crash_after_step"]
    events = manifest["tensorboard_event_files_by_phase"]
    runs_dir = TRAINER_RUNS / "resumed_lr_restart" / "runs"
    before = scalar_events(runs_dir / events["first"][0], "train/learning_rate")
    after = scalar_events(runs_dir / events["resume"][0], "train/learning_rate")
    assert sorted(before) == list(range(1, crash_step + 1))
    assert sorted(after) == list(range(resume_step + 1, manifest["training"]["max_steps"] + 1))
    assert after[resume_step + 1] == 0.0 < before[resume_step + 1]  # warmup starts again
    # Same steps, very different LRs: far below while re-warming, then far above the decayed one.
    ratios = [after[s] / before[s] for s in range(resume_step + 2, crash_step + 1)]
    assert min(ratios) < 0.1
    assert max(ratios) > 2.0


def test_resumed_trainer_state_shows_the_restart_and_fresh_optimizer_state() -> None:
    torch = pytest.importorskip("torch")
    planted = manifest_of("resumed_lr_restart")["planted"]
    resume_step = planted["resume_step"]
    rows = training_rows("resumed_lr_restart")
    assert rows[resume_step]["learning_rate"] > 1e-3
    assert rows[resume_step + 1]["learning_rate"] == 0.0
    checkpoint = TRAINER_RUNS / "resumed_lr_restart" / planted["resume_from_checkpoint"]
    assert (checkpoint / "optimizer.pt").is_file() and not (checkpoint / "scheduler.pt").exists()

    def adam_step(run: str) -> float:
        path = TRAINER_RUNS / run / "checkpoint-240" / "optimizer.pt"
        state = torch.load(path, map_location="cpu", weights_only=True)["state"]
        return float(state[0]["step"])

    assert adam_step("stable") == 240
    assert adam_step("resumed_lr_restart") == 240 - resume_step


def test_resume_replayed_the_same_batches() -> None:
    """The Trainer skipped the consumed batches on resume: steps 121-165 saw the same data twice."""
    first, resumed = manifest_of("resumed_lr_restart")["phases"]
    overlap = range(resumed["first_step"], first["last_step"] + 1)
    assert len(overlap) == 45
    for step in overlap:
        first_batch = first["batch_sample_ids"][step - first["first_step"]]
        resumed_batch = resumed["batch_sample_ids"][step - resumed["first_step"]]
        assert first_batch == resumed_batch
