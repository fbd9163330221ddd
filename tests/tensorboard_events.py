"""Event files for the TensorBoard reader tests, written at test time by the real writers (torch's
SummaryWriter, tensorboard's EventFileWriter), and TensorBoard's EventAccumulator as the oracle."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.model import LogRead

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")
tensor_pb2 = pytest.importorskip("tensorboard.compat.proto.tensor_pb2")
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

READER = TensorBoardReader()


def the_event_file(directory: Path) -> Path:
    files = sorted(directory.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    return files[0]


def write_with_summary_writer(directory: Path, log: Callable[[object], None]) -> Path:
    writer = torch_tensorboard.SummaryWriter(log_dir=str(directory))
    log(writer)
    writer.close()
    return the_event_file(directory)


def scalar_event(step: int, *values: tuple[str, float]) -> object:
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values]
    )
    return event_pb2.Event(wall_time=time.time(), step=step, summary=summary)


def write_events(directory: Path, events: list[object]) -> Path:
    writer = EventFileWriter(str(directory))
    for event in events:
        writer.add_event(event)
    writer.close()
    return the_event_file(directory)


def tensor_event(step: int, tag: str, value: float, with_metadata: bool) -> object:
    """A TF2-style scalar: DT_FLOAT tensor_content, plugin metadata on the tag's first value only."""
    tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
    summary_value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if with_metadata:
        summary_value.metadata.plugin_data.plugin_name = "scalars"
    summary = summary_pb2.Summary(value=[summary_value])
    return event_pb2.Event(wall_time=time.time(), step=step, summary=summary)


def series(read: LogRead, metric: str) -> tuple[list[int], np.ndarray]:
    table = read.metrics.to_frame()
    rows = table[table["metric"] == metric].sort_values("order")
    return rows["step"].tolist(), rows["value"].to_numpy(np.float64)


@pytest.fixture(scope="module")
def small_file_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    def log(writer: object) -> None:
        writer.add_text("args", '{"seed": 1}')
        for step in range(40):
            writer.add_scalar("train/loss", 2.0 + step / 10, step)
            writer.add_scalar("lr", 1e-3, step, new_style=step % 2 == 0)

    return write_with_summary_writer(tmp_path_factory.mktemp("small"), log).read_bytes()
