"""Scalars downloaded from TensorBoard's web UI (`Wall time,Step,Value`, one tag per file).

The files are made by TensorBoard's own code: the demo's nanoGPT-style loop (a real tiny GPT, an
LR ×20 jump planted) logs under the PyTorch tutorial's tags with torch's SummaryWriter, and the
scalars plugin that serves the dashboard's "download CSV" link writes each tag's CSV. Before the
reader, each file was one series called "Value": the folder had no loss and was "insufficient
data", the LR jump unseen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tscope.demo.run_folder import METRICS_NAME
from tscope.demo.train import DemoRun, make_demo_run
from tscope.ingest.readers.tensorboard_csv import metric_of, tag_of
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze

pytest.importorskip("tensorboard")

TUTORIAL_TAGS = {
    "train/loss": "Loss/train",
    "eval/loss": "Loss/val",
    "train/grad_norm": "GradNorm",
    "train/learning_rate": "LearningRate",
}


def _tensorboard_downloads(rows: list[dict[str, float]], logdir: Path, out: Path) -> Path:
    """Each tag's CSV as TensorBoard's scalars plugin serves it, named as the dashboard names the
    download (`run-<run>-tag-<tag>.csv`, "/" written as "_")."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.scalar.scalars_plugin import OutputFormat, ScalarsPlugin
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    for row in rows:
        for name, tag in TUTORIAL_TAGS.items():
            if name in row:
                writer.add_scalar(tag, row[name], int(row["step"]))
    writer.close()
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    plugin = ScalarsPlugin(
        base_plugin.TBContext(
            data_provider=data_provider.MultiplexerDataProvider(multiplexer, str(logdir)),
            logdir=str(logdir),
            multiplexer=multiplexer,
        )
    )
    out.mkdir()
    for tag in TUTORIAL_TAGS.values():
        body, _ = plugin.scalars_impl(context.RequestContext(), tag, ".", "", OutputFormat.CSV)
        (out / f"run-.-tag-{tag.replace('/', '_')}.csv").write_text(body)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return make_demo_run(tmp_path_factory.mktemp("tb_csv") / "run", steps=200)


def test_a_folder_of_downloads_is_one_run_with_its_lr_jump_headlined(
    demo: DemoRun, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in (demo.run_dir / METRICS_NAME).read_text().splitlines()]
    folder = _tensorboard_downloads(rows, tmp_path / "events", tmp_path / "downloads")
    case = analyze(folder)
    assert {LOSS, EVAL_LOSS, GRAD_NORM, LEARNING_RATE} <= set(case.metrics)
    assert case.summary.status == "incident"
    headline = case.findings[0]
    assert headline.category == "lr_schedule_jump"
    assert abs(int(headline.step or -1) - demo.planted_step) <= 1


@pytest.mark.parametrize(
    ("file_name", "tag", "metric"),
    [
        ("run-.-tag-Loss_train.csv", "Loss_train", LOSS),
        ("run-.-tag-Loss_val.csv", "Loss_val", EVAL_LOSS),
        ("run-version_0-tag-train_loss.csv", "train_loss", LOSS),
        ("run_logs-tag-train_grad_norm.csv", "train_grad_norm", GRAD_NORM),
        ("run-.-tag-LearningRate.csv", "LearningRate", LEARNING_RATE),
        ("loss.csv", "loss", LOSS),  # renamed after the download: the stem is the tag
        ("run-.-tag-Accuracy_train.csv", "Accuracy_train", "Accuracy_train"),  # unknown: kept
    ],
)
def test_the_tag_is_read_back_from_the_file_name(file_name: str, tag: str, metric: str) -> None:
    assert tag_of(file_name) == tag
    assert metric_of(tag) == metric


def test_a_single_download_is_read_under_its_tag(tmp_path: Path) -> None:
    path = tmp_path / "run-.-tag-Loss_train.csv"
    lines = ["Wall time,Step,Value"]
    lines += [f"{1.7e9 + step},{step},{3.0 - 0.002 * step}" for step in range(100)]
    path.write_text("\r\n".join(lines) + "\r\n")
    case = analyze(path)
    assert LOSS in case.metrics
    assert "Value" not in case.metrics
    assert case.summary.status == "healthy"
