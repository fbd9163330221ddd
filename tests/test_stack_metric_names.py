"""Runs of training stacks tscope had not seen, logged under each stack's own metric names.

Each stack's run is written the way that stack writes it: torch's SummaryWriter with the stack's
exact tags for the TensorBoard writers (torchtitan, Composer, MaxText, NeMo, Megatron-LM, DeepSpeed's
monitor, torchtune, fairseq's per-split directories), TF2 tensor summaries in Keras' `train/` and
`validation/` directories, and a W&B `history()` dump (JSONL, `_step`) for the stacks that log to
W&B (OLMo, OLMo-core, Levanter, nanotron). Where each name comes from is tabled in
`tscope/ingest/logs/names.py`.

One seeded run (400 steps, warm-up + cosine) per stack, either healthy or with the LR ×20 for five
steps from step 240 (the loss reacts a step later, the grad norm with it): the jump must be the
headline at its step, and the healthy run must warn of nothing. Each stack also logs the series
that look like a loss, LR or grad norm but are not the run's (torchtitan's worst-rank loss, a
second parameter group's LR, a clipped or per-layer norm): they keep their own names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard_events import tensor_event, write_events

from tests.stack_runs import (
    JUMP_AT,
    ROLE_METRICS,
    STACKS,
    STEP_TOLERANCE,
    Stack,
    run_series,
    torch_tensorboard,
    write_run,
    write_summary_writer,
)
from tscope.analyzers.signals import primary_loss
from tscope.ingest.logs.names import canonical_metric
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run


def _originals(run: object, metric: str) -> set[str]:
    frame = run.metrics.to_frame()  # type: ignore[attr-defined]
    return set(frame.loc[frame["metric"] == metric, "original_name"])


@pytest.mark.parametrize("stack", STACKS, ids=[stack.name for stack in STACKS])
def test_a_stacks_lr_jump_is_recognized_and_headlined(stack: Stack, tmp_path: Path) -> None:
    analysis = analyze_run(write_run(stack, run_series(lr_jump=True), tmp_path))
    for role, tag in stack.roles.items():
        assert _originals(analysis.run, ROLE_METRICS[role]) == {tag}, role
    for tag in stack.others:
        assert not _originals(analysis.run, LOSS) & {tag}
        assert any(tag in _originals(analysis.run, m) for m in analysis.case.metrics), tag
    headline = analysis.case.findings[0]
    assert headline.category == "lr_schedule_jump", [f.category for f in analysis.case.findings]
    assert abs(int(headline.step or -1) - JUMP_AT) <= STEP_TOLERANCE
    assert analysis.case.summary.status == "incident"


@pytest.mark.parametrize("stack", STACKS, ids=[stack.name for stack in STACKS])
def test_a_stacks_healthy_run_warns_of_nothing(stack: Stack, tmp_path: Path) -> None:
    analysis = analyze_run(write_run(stack, run_series(lr_jump=False), tmp_path))
    assert analysis.run.has(LOSS) and analysis.run.has(LEARNING_RATE)
    warnings = [f for f in analysis.case.findings if f.severity in ("warning", "critical")]
    assert not warnings, [(f.category, f.severity, f.step) for f in warnings]
    assert analysis.case.summary.status == "healthy"


def test_keras_per_batch_logging_keeps_the_epoch_series_apart(tmp_path: Path) -> None:
    """update_freq="batch": `batch_loss` counts batches, `epoch_*` count epochs. The LR Keras logs
    only per epoch, so it must not become the run's LR on the batch axis."""
    from tscope.ingest.readers.tensorboard import TensorBoardReader

    events = [
        tensor_event(batch, "batch_loss", 3.0 - batch / 100, batch == 1) for batch in range(1, 101)
    ]
    events += [tensor_event(epoch, "epoch_loss", 2.5, epoch == 1) for epoch in range(1, 3)]
    events += [
        tensor_event(epoch, "epoch_learning_rate", 1e-3, epoch == 1) for epoch in range(1, 3)
    ]
    (tmp_path / "train").mkdir()
    read = TensorBoardReader().read(write_events(tmp_path / "train", events), "train/e")
    frame = read.metrics.to_frame()
    names = dict(zip(frame["original_name"], frame["metric"], strict=True))
    assert names == {
        "batch_loss": LOSS,
        "epoch_loss": "epoch_loss",
        "epoch_learning_rate": "epoch_learning_rate",
    }


def test_fairseq_wandb_keys_prefer_the_interval_series_to_the_epoch_means(tmp_path: Path) -> None:
    """fairseq's W&B bar logs `train_inner/<x>` every interval and `train/<x>` at each epoch's end:
    the interval series is the loss; the epoch means keep their key, numbered apart."""
    rows = [{"_step": step, "train_inner/loss": 5.0 - step / 100} for step in range(1, 201)]
    rows += [{"_step": step, "train/loss": 4.0, "valid/loss": 4.1} for step in (100, 200)]
    run_dir = tmp_path / "fairseq_wandb"
    run_dir.mkdir()
    (run_dir / "history.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    run = analyze_run(run_dir).run
    assert _originals(run, LOSS) == {"train_inner/loss"}
    assert _originals(run, EVAL_LOSS) == {"valid/loss"}
    assert any(name.startswith("train/loss (") for name in run.metrics.to_frame()["metric"])


@pytest.mark.parametrize("tag", ["model/xent_loss", "objective/nll_loss"])
def test_a_loss_named_by_an_unknown_stack_is_still_scanned(tag: str, tmp_path: Path) -> None:
    """Not in the table, but named like a loss: the spike it shows is reported, not dropped."""
    series = run_series(lr_jump=True)
    write_summary_writer(tmp_path / "run", {tag: series["loss"], "sched/step_size": series["lr"]})
    case = analyze_run(tmp_path / "run").case
    assert tag in case.metrics and "sched/step_size" in case.metrics
    spikes = [f for f in case.findings if f.category == "loss_spike"]
    assert spikes and abs(int(spikes[0].step or -1) - (JUMP_AT + 1)) <= STEP_TOLERANCE


def test_fairseq_splits_stay_apart_and_a_lone_run_called_test_keeps_its_tags(
    tmp_path: Path,
) -> None:
    fairseq = next(stack for stack in STACKS if stack.name == "fairseq")
    run = analyze_run(write_run(fairseq, run_series(lr_jump=False), tmp_path)).run
    frame = run.metrics.to_frame()
    assert set(frame.loc[frame["metric"] == EVAL_LOSS, "source"].str.split("/").str[0]) == {"valid"}
    assert run.has("valid1/loss") and run.has("train/loss (epoch mean)")
    assert not [event for event in run.events if event.kind == "resume"]

    series = run_series(lr_jump=False)
    write_summary_writer(tmp_path / "runs" / "test", {"loss": series["loss"], "lr": series["lr"]})
    lone = analyze_run(tmp_path / "runs" / "test").run
    assert _originals(lone, LOSS) == {"loss"} and _originals(lone, LEARNING_RATE) == {"lr"}


@pytest.mark.parametrize(
    ("samples", "steps"),
    [
        ([0, 512, 1024, 1536], [0, 1, 2, 3]),  # a fixed global batch of 512: DeepSpeed's steps
        ([0, 256, 768, 1280], [0, 256, 768, 1280]),  # a batch-size ramp: left as samples
        ([4096], [4096]),  # one point: the batch cannot be told
    ],
    ids=["fixed-batch", "ramp", "one-point"],
)
def test_deepspeed_samples_axis(samples: list[int], steps: list[int], tmp_path: Path) -> None:
    from tscope.ingest.readers.tensorboard import TensorBoardReader

    writer = torch_tensorboard.SummaryWriter(log_dir=str(tmp_path))
    for index, sample in enumerate(samples):
        writer.add_scalar("Train/Samples/train_loss", 3.0 - index / 10, sample)
    writer.close()
    read = TensorBoardReader().read(next(tmp_path.glob("events.out.tfevents.*")), "e")
    assert read.metrics.to_frame()["step"].tolist() == steps
    assert [caveat.kind for caveat in read.caveats] == ["samples_axis"]
    divided = steps != samples
    assert ("samples / 512" in read.caveats[0].message) == divided


def test_a_resumed_monitor_file_with_one_point_takes_the_runs_batch(tmp_path: Path) -> None:
    """A resume starts a new event file; one point there cannot show the batch by itself, so it
    takes the one the run's other monitor file showed (left as a sample count, the lone loss sat
    thousands of steps after the run's end)."""
    import time

    before = [(3.0 - i / 10, sample) for i, sample in enumerate(range(0, 512 * 40, 512))]
    for points in (before, [(2.0, 512 * 40)]):
        writer = torch_tensorboard.SummaryWriter(log_dir=str(tmp_path / "run"))
        for value, sample in points:
            writer.add_scalar("Train/Samples/train_loss", value, sample)
        writer.close()
        time.sleep(1.1)  # event file names hold the second they were opened
    run = analyze_run(tmp_path / "run").run
    steps, _ = run.series(LOSS)
    assert steps.tolist() == list(range(41))
    messages = [caveat.message for caveat in run.caveats if caveat.kind == "samples_axis"]
    assert messages and all("samples / 512" in message for message in messages)


def test_epoch_loss_is_the_loss_beside_a_batch_size_column() -> None:
    from tscope.ingest.logs.names import canonical_metrics

    assert canonical_metrics(["batch_size", "epoch_loss"]) == ["batch_size", LOSS]
    assert canonical_metrics(["batch_loss", "epoch_loss"]) == [LOSS, "epoch_loss"]


def test_a_split_folder_looks_for_its_sibling_splits_only_inside_the_input(tmp_path: Path) -> None:
    """`tscope analyze exp/valid` reads nothing outside `exp/valid`: the `train/` beside it is not
    the input's, so `valid/`'s `loss` keeps its tag (a lone folder); a `train` that is a symlink
    inside the input is not followed either (docs/security.md)."""
    series = run_series(lr_jump=False)
    write_summary_writer(tmp_path / "exp" / "valid", {"loss": series["loss"], "lr": series["lr"]})
    (tmp_path / "exp" / "train").mkdir()
    alone = analyze_run(tmp_path / "exp" / "valid").run
    assert _originals(alone, LOSS) == {"loss"} and not alone.has(EVAL_LOSS)

    linked = tmp_path / "linked"
    write_summary_writer(linked / "valid", {"loss": series["loss"], "lr": series["lr"]})
    (linked / "train").symlink_to(tmp_path / "exp" / "train", target_is_directory=True)
    run = analyze_run(linked).run
    assert _originals(run, LOSS) == {"loss"} and not run.has(EVAL_LOSS)


def test_deepspeeds_wandb_monitor_series_are_not_put_on_a_samples_step_axis(tmp_path: Path) -> None:
    """DeepSpeed's W&B monitor logs `Train/Samples/*` with `step=global_samples`: a history dump's
    `_step` counts samples, which only the TensorBoard reader converts. Read as the run's loss,
    an incident at step 240 would be reported at "step 122,880"; the series keep their names."""
    rows = [
        {"_step": step * 512, "Train/Samples/train_loss": 3.0, "Train/Samples/lr": 1e-3}
        for step in range(1, 201)
    ]
    run_dir = tmp_path / "deepspeed_wandb"
    run_dir.mkdir()
    (run_dir / "history.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    run = analyze_run(run_dir).run
    assert not run.has(LOSS) and not run.has(LEARNING_RATE)
    assert run.has("Train/Samples/train_loss")


@pytest.mark.parametrize("monitor_folder", ["runs", "DeepSpeedJobName"], ids=["same", "beside"])
def test_deepspeeds_monitor_beside_the_trainers_own_tensorboard(
    monitor_folder: str, tmp_path: Path
) -> None:
    """The Trainer with `tensorboard.enabled` in its DeepSpeed config: the Trainer's `train/loss`
    (steps) and the monitor's `Train/Samples/train_loss` (samples / batch) are two series of one
    run. Both named train/loss, they merged into one with resumes at steps 0 and 1 (one folder)
    or were refused as two separate runs (two folders)."""
    series = run_series(lr_jump=False)
    write_summary_writer(
        tmp_path / "run" / "runs",
        {"train/loss": series["loss"], "train/learning_rate": series["lr"]},
    )
    writer = torch_tensorboard.SummaryWriter(log_dir=str(tmp_path / "run" / monitor_folder))
    for step, (loss, lr) in enumerate(zip(series["loss"], series["lr"], strict=True)):
        writer.add_scalar("Train/Samples/train_loss", float(loss), step * 8)
        writer.add_scalar("Train/Samples/lr", float(lr), (step + 1) * 8)
    writer.close()
    run = analyze_run(tmp_path / "run").run
    assert _originals(run, LOSS) == {"train/loss"}
    assert _originals(run, LEARNING_RATE) == {"train/learning_rate"}
    assert run.has("Train/Samples/train_loss") and run.has("Train/Samples/lr")
    assert not run.events_of("resume")


@pytest.mark.parametrize(
    ("columns", "winner"),
    [
        (["Epoch/Loss", "Loss/train"], "Loss/train"),  # per-epoch mean vs the per-step loss
        (["cross_entropy_loss", "loss"], "loss"),  # a part of the loss vs the total
        (["Learning/Grad_Norm", "learning/raw_grad_norm"], "learning/raw_grad_norm"),
    ],
)
def test_a_second_choice_loses_in_any_spelling(columns: list[str], winner: str) -> None:
    """`epoch_loss`, `ce_loss` and MaxText's clipped norm lose to the step-level series however
    they are spelled (`Epoch/Loss` maps to the loss as `epoch_loss` does): listed first, they
    took the name."""
    from tscope.ingest.logs.table_columns import canonical_column_names

    named = dict(canonical_column_names(columns))
    assert [column for column, name in named.items() if name in (LOSS, GRAD_NORM)] == [winner]


def test_a_loss_named_after_an_evaluation_split_is_not_the_training_loss(tmp_path: Path) -> None:
    """With no canonical training loss, the loss-like series that names no evaluation split is
    the run's loss (`test_loss` sorts before `total_loss` in no order that matters); fairseq's
    `valid_loss` is the eval loss."""
    rows = [
        {"step": step, "test_loss": 3.0, "total_loss": 4.0 - step / 100, "valid_loss": 3.5}
        for step in range(1, 101)
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    analysis = analyze_run(path)
    assert _originals(analysis.run, EVAL_LOSS) == {"valid_loss"}
    assert primary_loss(analysis.run) == "total_loss"


@pytest.mark.parametrize("tag", ["grad/total_norm", "train/grad/total_norm", "grad/norm"])
def test_a_plain_loops_clip_grad_norm_total_is_the_gradient_norm(tag: str) -> None:
    """A plain loop logging clip_grad_norm_'s `total_norm` under a `grad/` group (a helper-made
    OneCycle run's TensorBoard tags): its gradient norm was not recognized."""
    from tscope.ingest.logs.names import canonical_metric
    from tscope.model.metric_names import GRAD_NORM

    assert canonical_metric(tag) == GRAD_NORM
    assert canonical_metric("param/total_norm") != GRAD_NORM


@pytest.mark.parametrize(
    ("tag", "canonical"),
    [
        ("optim/lr", LEARNING_RATE),
        ("optimizer/learning_rate", LEARNING_RATE),
        ("optim/grad_norm", GRAD_NORM),
        ("opt/gnorm", GRAD_NORM),
        ("optim/momentum", "optim/momentum"),  # other optimizer numbers stay themselves
        ("optimizer/loss", "optimizer/loss"),
    ],
)
def test_the_optimizers_own_group_names_its_lr_and_grad_norm(tag: str, canonical: str) -> None:
    # A custom loop's `optim/lr` and `optim/grad_norm` TensorBoard tags (healthy-run hunt of
    # session 25) stayed raw metrics, and the LR-based reasoning had nothing to read.
    assert canonical_metric(tag) == canonical
