"""Red team round 5 (session 28): crafted inputs that ended in a traceback, a hang or memory far
beyond the file's size. Each input is the smallest that showed it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import tscope
from tscope.ingest.discover import MAX_DEPTH, TOO_DEEP
from tscope.model import json_parse
from tscope.render.formatting import format_number


def _jsonl(folder: Path, rows: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_folders_nested_past_the_depth_limit_are_listed_as_partial(tmp_path: Path) -> None:
    """A chain of folders 400 deep with a file at each level took 99 s to discover (each file
    compared every parent with the root's parents): now nothing below MAX_DEPTH is listed."""
    run = _jsonl(tmp_path / "run", [{"step": s, "train/loss": 3 - s / 1000} for s in range(200)])
    folder = run
    for _ in range(MAX_DEPTH + 5):
        folder = folder / "d"
        folder.mkdir()
        (folder / "n").write_text("x")
    case = tscope.analyze(run)
    assert [p.problem for p in case.partial] == [TOO_DEEP]
    assert case.partial[0].path.count("d") == MAX_DEPTH + 1


def test_json_whose_parse_would_dwarf_its_bytes_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three bytes of `{},` parse into a 64-byte dict: 80 MB of them took 2.2 GB."""
    monkeypatch.setattr(json_parse, "MAX_PARSED_BYTES", 10_000_000)
    crafted = b'{"log_history": [' + b",".join([b"{}"] * 100_000) + b"]}"
    with pytest.raises(json_parse.RefusedJson, match="once parsed"):
        json_parse.parse(crafted)
    rows = [{"step": s, "loss": 2.5, "learning_rate": 1e-4, "grad_norm": 1.0} for s in range(1000)]
    assert len(json_parse.parse(json.dumps({"log_history": rows}).encode())["log_history"]) == 1000


def test_a_value_at_the_float_limit_is_written_not_crashed_on() -> None:
    assert format_number(1.7976931348623157e308) == "1.8e308"
    assert format_number(-1.7976931348623157e308) == "-1.8e308"


@pytest.mark.parametrize(
    "extra",
    [
        lambda s: {
            "train/loss_scale": 65536.0,
            "train/skipped_steps": 1e308 if s in (100, 200) else 0,
        },
        lambda s: {"train/loss_scale": 5e-324 if s == 150 else 65536.0},
        lambda s: {"router/aux_loss": -1.7e308 if s in (141, 142) else 1.0 + 0.001 * (s % 7)},
        lambda s: {
            "train/grad_norm": 1e308 if s == 150 else 1.0,
            "train/learning_rate": -0.0 if s < 5 else (1e308 if s == 200 else 1e-4),
        },
    ],
    ids=["skip-count-1e308", "scale-5e-324", "aux-loss-near-float-max", "lr-and-norm-1e308"],
)
def test_values_at_the_float_limits_are_analyzed_without_a_traceback_or_a_warning(
    tmp_path: Path, extra
) -> None:  # type: ignore[no-untyped-def]
    rows = [{"step": s, "train/loss": 3.0 - s * 0.002, **extra(s)} for s in range(1, 401)]
    rows[149]["train/loss"] = 1e308 if "train/grad_norm" in rows[149] else rows[149]["train/loss"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        case = tscope.analyze(_jsonl(tmp_path / "run", rows))
    assert case.summary.status


def test_a_megatron_skip_count_of_inf_is_partial(tmp_path: Path) -> None:
    lines = []
    for it in range(1, 201):
        skipped = "inf" if it == 120 else "0"
        lines.append(
            f" iteration {it:8d}/ 1000 | consumed samples: {it * 8} | learning rate: 1.000E-04 |"
            f" global batch size: 8 | lm loss: {3.0 - it * 0.001:.6E} | loss scale: 4096.0 |"
            f" grad norm: 1.234 | number of skipped iterations: {skipped} |"
        )
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    case = tscope.analyze(tmp_path / "train.log")
    assert any("skipped-iteration count" in p.problem for p in case.partial)
