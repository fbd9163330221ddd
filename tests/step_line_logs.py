"""Shared by the step-line reader's tests: the reader, a log written into a test's folder, and
what the reader reads of a log, series by series."""

from __future__ import annotations

from pathlib import Path

from tscope.ingest.readers.step_lines import StepLineLogReader

READER = StepLineLogReader()


def series_in(path: Path, reader: object = READER) -> dict[str, dict[int, float]]:
    """{series: {step: value}} of what `reader` reads of the file."""
    read = reader.read(path, path.name)  # type: ignore[attr-defined]
    table = read.metrics
    out: dict[str, dict[int, float]] = {}
    for code, name in enumerate(table.metric.labels):
        chosen = table.metric.codes == code
        out[name] = dict(
            zip(table.step[chosen].tolist(), table.value[chosen].tolist(), strict=True)
        )
    return out


def write_log(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
