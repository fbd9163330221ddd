"""Shared by the text-log reader tests: files written at test time, a series or a step of a read,
and a Megatron iteration record as training.py prints it."""

from __future__ import annotations

from pathlib import Path

from tscope.model import LogRead

DATA = Path(__file__).parent / "data" / "text_logs"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def series(read: LogRead, metric: str) -> list[tuple[int, float]]:
    table = read.metrics.to_frame()
    rows = table[table["metric"] == metric].sort_values("order")
    return list(zip(rows["step"].tolist(), rows["value"].tolist(), strict=True))


def megatron_record(step: int, loss: str = "2.5E+00", tail: str = "") -> str:
    return (
        f" iteration {step:8d}/    1000 | consumed samples: {step * 8:12d} | elapsed time per "
        f"iteration (ms): 1000.0 | learning rate: 1.000E-04 | global batch size:     8 | "
        f"lm loss: {loss} | loss scale: 4096.0 | grad norm: 1.234 | number of skipped "
        f"iterations:   0 | number of nan iterations:   0 |{tail}\n"
    )
