"""TensorBoard event files, written at test time by the real writers.

torch's SummaryWriter writes the scalars (plain `simple_value` and `new_style` tensors), the
HF Trainer's own TensorBoardCallback writes a tiny GPT-2 run, and tensorboard's EventFileWriter
writes the events SummaryWriter cannot (TF2-style tensors, negative steps, several values per
event). TensorBoard's EventAccumulator, told to keep every point, is the oracle for values.
Damaged files are tests/test_reader_tensorboard_damaged.py.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from tscope.ingest.discover import discover
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.ingest.registry import READERS
from tscope.model import METRIC_COLUMNS, LogRead
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS, LOSS_SCALE

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)
from tensorboard.util import tensor_util  # noqa: E402
from tensorboard_events import (  # noqa: E402
    READER,
    scalar_event,
    series,
    small_file_bytes,  # noqa: F401 (a fixture)
    tensor_event,
    write_events,
    write_with_summary_writer,
)

SPIKE_STEP, NAN_STEP, INF_STEP = 120, 150, 151


def oracle(path: Path) -> dict[str, tuple[list[int], np.ndarray]]:
    """Every scalar as TensorBoard itself reads it, nothing sampled away.

    EventAccumulator files `simple_value` under scalars and `new_style` ones under tensors.
    """
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    points = {}
    for tag in accumulator.Tags()["scalars"]:
        events = accumulator.Scalars(tag)
        points[tag] = ([e.step for e in events], np.asarray([e.value for e in events], np.float64))
    for tag in accumulator.Tags()["tensors"]:
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        events = accumulator.Tensors(tag)
        values = [tensor_util.make_ndarray(e.tensor_proto).item() for e in events]
        points[tag] = ([e.step for e in events], np.asarray(values, np.float64))
    return points


def by_original_name(read: LogRead) -> dict[str, tuple[list[int], np.ndarray]]:
    table = read.metrics.to_frame().sort_values("order")
    return {
        str(tag): (rows["step"].tolist(), rows["value"].to_numpy(np.float64))
        for tag, rows in table.groupby("original_name", sort=False)
    }


def f32(value: float) -> float:
    return float(np.float32(value))


def trend(step: int) -> float:
    return 4.0 * math.exp(-step / 80) + 2.0


def log_incident_run(writer: object, new_style: bool) -> None:
    """300 steps: a 3x loss spike at 120 with the grad norm jumping, NaN at 150, Inf at 151."""
    writer.add_text("args", '{"learning_rate": 0.0003, "logging_steps": 1, "optim": {"b": 2}}')
    for step in range(300):
        loss = trend(step) * (3.0 if step == SPIKE_STEP else 1.0)
        loss = math.nan if step == NAN_STEP else math.inf if step == INF_STEP else loss
        writer.add_scalar("train/loss", loss, step, new_style=new_style)
        grad_norm = 25.0 if step == SPIKE_STEP else 1.0
        writer.add_scalar("train/grad_norm", grad_norm, step, new_style=new_style)
        writer.add_scalar("train/learning_rate", 3e-4, step, new_style=new_style)
        if step % 50 == 0:
            writer.add_scalar("eval/loss", trend(step) + 0.1, step, new_style=new_style)


@pytest.fixture(scope="module")
def incident_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    files = {}
    for new_style in (False, True):
        directory = tmp_path_factory.mktemp(f"incident_new_style_{new_style}")
        files[f"new_style={new_style}"] = write_with_summary_writer(
            directory, lambda writer, new_style=new_style: log_incident_run(writer, new_style)
        )
    return files


@pytest.mark.parametrize("style", ["new_style=False", "new_style=True"])
def test_every_point_kept_with_the_spike_nan_and_inf(
    incident_files: dict[str, Path], style: str
) -> None:
    read = READER.read(incident_files[style], "runs/x/events.out.tfevents.1")

    steps, loss = series(read, LOSS)
    assert steps == list(range(300))
    assert loss[SPIKE_STEP] == f32(3 * trend(SPIKE_STEP))
    assert loss[SPIKE_STEP - 1] == f32(trend(SPIKE_STEP - 1))
    assert math.isnan(loss[NAN_STEP])
    assert loss[INF_STEP] == math.inf
    steps, grad_norm = series(read, GRAD_NORM)
    assert steps == list(range(300))
    assert grad_norm[SPIKE_STEP] == 25.0 and grad_norm[SPIKE_STEP - 1] == 1.0
    assert series(read, LEARNING_RATE)[0] == list(range(300))
    assert series(read, EVAL_LOSS)[0] == [0, 50, 100, 150, 200, 250]
    assert read.partial == []
    assert read.kind == "tensorboard"
    assert list(read.metrics.columns) == list(METRIC_COLUMNS)
    assert read.metrics["order"].tolist() == list(range(len(read.metrics)))
    assert set(read.metrics["source"]) == {"runs/x/events.out.tfevents.1"}
    assert read.config == {"learning_rate": 0.0003, "logging_steps": 1, "optim.b": 2}


@pytest.mark.parametrize("style", ["new_style=False", "new_style=True"])
def test_values_match_tensorboards_own_reader(incident_files: dict[str, Path], style: str) -> None:
    read = READER.read(incident_files[style], "events.out.tfevents.1")
    expected = oracle(incident_files[style])
    got = by_original_name(read)
    assert got.keys() == expected.keys()
    for tag, (steps, values) in expected.items():
        assert got[tag][0] == steps, tag
        np.testing.assert_array_equal(got[tag][1], values)


def test_double_precision_new_style_values_are_exact(tmp_path: Path) -> None:
    def log(writer: object) -> None:
        for step in range(5):
            writer.add_scalar(
                "train/loss", 1 / 3 + step, step, new_style=True, double_precision=True
            )

    read = READER.read(write_with_summary_writer(tmp_path, log), "e.tfevents")
    assert series(read, LOSS)[1].tolist() == [1 / 3 + step for step in range(5)]


def test_irregular_layouts_and_long_step_numbers_match_the_oracle(tmp_path: Path) -> None:
    """Tags of many lengths, logged irregularly, with steps whose varints take 1 to 4 bytes."""
    steps = [*range(0, 300), *range(16_300, 16_500), *range(2_097_100, 2_097_200)]

    def log(writer: object) -> None:
        for index, step in enumerate(steps):
            writer.add_scalar("train/loss", 1.0 + index / 1000, step)
            if index % 7 == 0:
                writer.add_scalar("eval/loss", 2.0 + index, step, new_style=True)
            if index % 3 == 0:
                writer.add_scalar("layers." + "x" * (index % 40) + "/grad_norm", index, step)
            if index % 11 == 0:
                writer.add_scalar("train/learning_rate", 1e-4, step, double_precision=True)

    path = write_with_summary_writer(tmp_path, log)
    read = READER.read(path, "e.tfevents")
    expected = oracle(path)
    got = by_original_name(read)
    assert got.keys() == expected.keys()
    for tag, (tag_steps, values) in expected.items():
        assert got[tag][0] == tag_steps, tag
        np.testing.assert_array_equal(got[tag][1], values)
    assert series(read, LOSS)[0] == steps


def test_more_points_than_eventaccumulator_keeps_by_default(tmp_path: Path) -> None:
    points = 12_000  # the default reservoir keeps 10,000 per tag (DOMAIN.md §3)

    def log(writer: object) -> None:
        for step in range(points):
            writer.add_scalar("train/loss", step / points, step)

    path = write_with_summary_writer(tmp_path, log)
    default = EventAccumulator(str(path))
    default.Reload()
    assert len(default.Scalars("train/loss")) == 10_000
    steps, values = series(READER.read(path, "e.tfevents"), LOSS)
    assert steps == list(range(points))
    np.testing.assert_array_equal(values, np.float32(np.arange(points) / points))


def test_duplicate_and_backward_steps_are_kept_as_logged(tmp_path: Path) -> None:
    """A resumed run re-logs steps 5-9: both segments stay, in file order, for assembly."""

    def log(writer: object) -> None:
        for step in [*range(10), *range(5, 15), 14]:
            writer.add_scalar("train/loss", float(step), step)

    read = READER.read(write_with_summary_writer(tmp_path, log), "e.tfevents")
    assert series(read, LOSS)[0] == [*range(10), *range(5, 15), 14]


def test_started_at_is_the_first_events_wall_time(tmp_path: Path) -> None:
    before = time.time()
    first = write_with_summary_writer(
        tmp_path / "a", lambda writer: writer.add_scalar("loss", 1.0, 0)
    )
    time.sleep(0.01)
    second = write_with_summary_writer(
        tmp_path / "b", lambda writer: writer.add_scalar("loss", 1.0, 0)
    )
    started = READER.read(first, "a").started_at
    later = READER.read(second, "b").started_at
    assert started is not None and later is not None
    assert before - 1 <= started < later <= time.time()


@pytest.mark.parametrize(
    "tags",
    [
        {  # Megatron-LM
            "lm loss": LOSS,
            "learning-rate": LEARNING_RATE,
            "loss-scale": LOSS_SCALE,
            "grad-norm": GRAD_NORM,
            "lm loss validation": EVAL_LOSS,
        },
        {  # Megatron-DeepSpeed (BigScience): "<group>/<series>"
            "lm-loss-training/lm loss": LOSS,
            "grad-norm/grad-norm": GRAD_NORM,
            "lm-loss-validation/lm loss validation ppl": "lm-loss-validation/lm loss validation ppl",
        },
    ],
    ids=["megatron-lm", "megatron-deepspeed"],
)
def test_megatron_tags_are_canonical_and_sample_axes_left_out(
    tmp_path: Path, tags: dict[str, str]
) -> None:
    def log(writer: object) -> None:
        for step in (1, 2):
            for tag in tags:
                writer.add_scalar(tag, 1.0, step)
            writer.add_scalar("lm loss vs samples", 1.0, step * 512)
            writer.add_scalar("lm-loss-training/lm loss vs tokens", 1.0, step * 2**20)
            writer.add_scalar("steps-vs-samples/y=steps,x=samples", step, step * 512)

    read = READER.read(write_with_summary_writer(tmp_path, log), "e.tfevents")
    pairs = set(zip(read.metrics["original_name"], read.metrics["metric"], strict=True))
    assert pairs == set(tags.items())
    assert read.metrics["step"].max() == 2


def test_two_tags_of_one_metric_stay_two_series(tmp_path: Path) -> None:
    """A file logging `loss` and `train/loss` (two sources) keeps them apart, never interleaved:
    the canonical spelling takes the name, the other keeps its tag."""

    def log(writer: object) -> None:
        for step in (1, 2, 3):
            writer.add_scalar("loss", 10.0 + step, step)
            writer.add_scalar("train/loss", 1.0 + step, step)

    read = READER.read(write_with_summary_writer(tmp_path, log), "e.tfevents")
    steps, values = series(read, LOSS)
    assert steps == [1, 2, 3] and values.tolist() == pytest.approx([2.0, 3.0, 4.0])
    steps, values = series(read, "loss")
    assert steps == [1, 2, 3] and values.tolist() == pytest.approx([11.0, 12.0, 13.0])


def test_text_and_hparams_become_config(tmp_path: Path) -> None:
    def log(writer: object) -> None:
        writer.add_text("args", "not json: --lr 3e-4")
        writer.add_text("model_config", '{"n_layer": 2, "rope": {"theta": 10000}}')
        writer.add_text("notes", '{"ignored": true}')  # only known config tags become config
        writer.add_scalar("loss", 1.0, 0)

    read = READER.read(write_with_summary_writer(tmp_path, log), "e.tfevents")
    assert read.config == {
        "args": "not json: --lr 3e-4",
        "model_config.n_layer": 2,
        "model_config.rope.theta": 10000,
    }

    directory = tmp_path / "hparams"
    writer = torch_tensorboard.SummaryWriter(log_dir=str(directory))
    writer.add_hparams({"lr": 0.1, "optimizer": "adamw"}, {"hparam/loss": 2.5}, run_name="trial")
    writer.close()
    hparams_file = next((directory / "trial").glob("events.out.tfevents.*"))
    read = READER.read(hparams_file, "trial/e.tfevents")
    assert read.config == {"lr": 0.1, "optimizer": "adamw"}
    assert series(read, "hparam/loss")[1].tolist() == [2.5]


def test_tf2_tensors_with_metadata_only_on_the_first_value(tmp_path: Path) -> None:
    events = [
        tensor_event(step, "epoch_loss", 1.5 + step, with_metadata=step == 0) for step in range(4)
    ]
    read = READER.read(write_events(tmp_path, events), "e.tfevents")
    # Keras' per-epoch loss (tf.summary tensors): the loss of a run that logs no per-batch series
    assert series(read, LOSS) == ([0, 1, 2, 3], pytest.approx([1.5, 2.5, 3.5, 4.5]))


def test_several_values_per_event_and_negative_or_huge_steps(tmp_path: Path) -> None:
    events = [
        scalar_event(-1, ("train/loss", 9.0)),
        scalar_event(3, ("train/loss", 1.0), ("train/grad_norm", 2.0), ("x", 3.0)),
        scalar_event(2**60, ("train/loss", 4.0)),
    ]
    read = READER.read(write_events(tmp_path, events), "e.tfevents")
    table = read.metrics.sort_values("order")
    # A step at or beyond 2**53 is dropped and counted (float axes cannot tell such steps apart:
    # the chart divided by zero), as the CSV and trainer_state readers already did.
    assert table["original_name"].tolist() == ["train/loss", "train/loss", "train/grad_norm", "x"]
    assert table["step"].tolist() == [-1, 3, 3, 3]
    assert table["value"].tolist() == [9.0, 1.0, 2.0, 3.0]
    assert any("2**53" in problem.problem for problem in read.partial)


def test_hf_trainer_tensorboard_callback(tmp_path: Path) -> None:
    """The Trainer's own callback: per-step train/*, eval/loss, args and model config."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    samples = []
    for _ in range(16):
        ids = torch.randint(0, 64, (16,))
        samples.append({"input_ids": ids, "labels": ids})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=3,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=samples, eval_dataset=samples[:4]
    )
    trainer.train()
    logged = {
        entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry
    }

    path = next((tmp_path / "out").rglob("events.out.tfevents.*"))
    read = READER.read(path, "runs/e.tfevents")
    steps, loss = series(read, LOSS)
    # The end-of-training "train/train_loss" (the run's mean) must not stand in for step 6.
    assert steps == [1, 2, 3, 4, 5, 6]
    assert loss.tolist() == [f32(logged[step]) for step in steps]
    assert series(read, GRAD_NORM)[0] == [1, 2, 3, 4, 5, 6]
    assert series(read, LEARNING_RATE)[1][0] == pytest.approx(1e-3)
    assert series(read, EVAL_LOSS)[0] == [3, 6]
    assert "eval/runtime" not in set(read.metrics["metric"])
    assert read.config["learning_rate"] == 1e-3
    assert read.config["logging_steps"] == 1
    assert read.config["model_config.n_layer"] == 1
    assert read.partial == []


def test_registered_and_claimed_by_name(tmp_path: Path, small_file_bytes: bytes) -> None:
    assert any(isinstance(reader, TensorBoardReader) for reader in READERS)
    path = tmp_path / "runs" / "events.out.tfevents.1700000000.host.1.0"
    path.parent.mkdir()
    path.write_bytes(small_file_bytes)
    assert READER.can_read(path)
    assert not READER.can_read(tmp_path / "events.json")
    found = discover(tmp_path)
    assert [read.kind for read in found.reads] == ["tensorboard"]
    assert found.reads[0].path == "runs/events.out.tfevents.1700000000.host.1.0"
