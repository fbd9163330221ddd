"""W&B files written by hand from the UI and the API: the panel export (CSV with __MIN/__MAX
columns) and history()/scan_history() dumps (CSV, JSON records, JSON lines, pandas columns).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from wandb_helpers import series

from tscope.errors import UnreadableInput
from tscope.ingest.readers.metrics_table import MetricsTableReader
from tscope.ingest.readers.wandb_export import WandbExportReader
from tscope.ingest.readers.wandb_history import WandbHistoryReader

EXPORT = WandbExportReader()


HISTORY = WandbHistoryReader()


GENERIC = MetricsTableReader()


def ui_export(runs: dict[str, np.ndarray], bucket: int, x_axis: str = "Step") -> pd.DataFrame:
    """Bucket like the panel: last value per bucket, with the bucket's min and max."""
    frame = pd.DataFrame()
    for run, values in runs.items():
        steps = np.arange(len(values))
        buckets = pd.Series(values).groupby(steps // bucket)
        frame[x_axis] = buckets.apply(lambda b: b.index[-1]).to_numpy()
        frame[f"{run} - train/loss"] = buckets.last().to_numpy()
        frame[f"{run} - train/loss__MIN"] = buckets.min().to_numpy()
        frame[f"{run} - train/loss__MAX"] = buckets.max().to_numpy()
    return frame


def spiky_loss(length: int = 1000, spike_at: int = 503) -> np.ndarray:
    loss = np.linspace(4.0, 2.0, length)
    loss[spike_at] = 9.0
    return loss


def test_export_max_column_keeps_the_spike_the_main_column_hides(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export_2024-05-01.csv"
    ui_export({"brisk-pond-1": spiky_loss()}, bucket=10).to_csv(path, index=False)
    assert EXPORT.can_read(path)

    read = EXPORT.read(path, path.name)

    _, main = series(read, "train/loss")
    _, maxima = series(read, "train/loss__max")
    _, minima = series(read, "train/loss__min")
    assert main.max() < 5.0  # the spike is not the last value of its bucket
    assert maxima.max() == 9.0
    assert minima.min() == pytest.approx(2.0, abs=0.01)
    assert read.caveats[0].kind == "downsampled_export"
    assert path.name in read.caveats[0].message
    assert read.partial == []


def test_export_with_several_runs_reads_the_first_and_names_the_others(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    runs = {"run - a": spiky_loss(), "quiet-b": np.full(1000, 3.0), "c": np.full(1000, 1.0)}
    ui_export(runs, bucket=10).to_csv(path, index=False)

    read = EXPORT.read(path, "export.csv")

    _, maxima = series(read, "train/loss__max")
    assert maxima.max() == 9.0  # "run - a": split at the last " - "
    assert set(read.metrics.to_frame()["original_name"].str.split(" - train").str[0]) == {"run - a"}
    assert "'quiet-b'" in read.partial[0].problem and "'c'" in read.partial[0].problem


def test_export_ranks_competing_spellings_by_the_metric_name(tmp_path: Path) -> None:
    """Two columns of one run that both name the loss: the canonical spelling takes the name
    whatever the column order, as in every other reader (the `<run> - ` prefix is not ranked)."""
    path = tmp_path / "export.csv"
    steps = np.arange(50)
    pd.DataFrame(
        {
            "Step": steps,
            "brisk-pond-1 - loss": np.full(50, 7.0),  # first: would win a tie
            "brisk-pond-1 - train/loss": np.linspace(4.0, 2.0, 50),
        }
    ).to_csv(path, index=False)

    read = EXPORT.read(path, path.name)

    _, loss = series(read, "train/loss")
    assert loss[0] == pytest.approx(4.0) and loss[-1] == pytest.approx(2.0)


def test_group_export_warns_that_runs_are_aggregated(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    ui_export({"Group: sweep-7": spiky_loss()}, bucket=5).to_csv(path, index=False)
    read = EXPORT.read(path, "export.csv")
    assert {c.kind for c in read.caveats} == {"downsampled_export", "grouped_export"}


def test_export_with_a_non_step_x_axis_uses_the_runs_step_column(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    frame = ui_export({"r1": spiky_loss(100, 50)}, bucket=1, x_axis="epoch")
    frame["epoch"] = frame["epoch"] / 10
    frame.to_csv(path, index=False)
    with pytest.raises(UnreadableInput, match="Step as the x-axis"):
        EXPORT.read(path, "export.csv")

    frame["r1 - _step"] = np.arange(100) * 4
    frame["r1 - _step__MIN"] = frame["r1 - _step"]
    frame.to_csv(path, index=False)
    read = EXPORT.read(path, "export.csv")
    assert series(read, "train/loss")[0][:3].tolist() == [0, 4, 8]
    assert "_step" not in set(read.metrics["metric"])


def test_export_skips_empty_cells_and_other_readers_decline_it(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(
        '"Step","r - train/loss","r - train/loss__MIN","r - train/loss__MAX"\n'
        "0,3.0,3.0,3.0\n10,,,\n20,NaN,NaN,NaN\n"
    )
    read = EXPORT.read(path, "export.csv")
    steps, values = series(read, "train/loss")
    assert steps.tolist() == [0, 20]
    assert math.isnan(values[1])
    assert not GENERIC.can_read(path)
    assert not HISTORY.can_read(path)


def history_frame(rows: int = 300) -> pd.DataFrame:
    """What run.history() returns: every key a column, NaN where a row did not log it."""
    steps = np.arange(rows)
    return pd.DataFrame(
        {
            "_step": steps,
            "_runtime": steps * 0.5,
            "_timestamp": 1.7e9 + steps * 0.5,
            "train/loss": np.linspace(4, 2, rows),
            "eval/loss": np.where(steps % 100 == 0, 3.0, np.nan),
            "lr": 3e-4,
        }
    )


def test_history_csv_written_by_pandas_reads_without_zeros_or_clocks(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    history_frame().to_csv(path)  # pandas writes the index as an unnamed first column
    assert HISTORY.can_read(path) and not GENERIC.can_read(path) and not EXPORT.can_read(path)

    read = HISTORY.read(path, "history.csv")

    assert set(read.metrics["metric"]) == {"train/loss", "eval/loss", "train/learning_rate"}
    assert series(read, "eval/loss")[0].tolist() == [0, 100, 200]
    assert read.started_at == pytest.approx(1.7e9)
    assert read.caveats == []


@pytest.mark.parametrize("layout", ["records-json", "jsonl", "pandas-columns-json"])
def test_history_json_layouts_read_sparse_scan_history_rows(tmp_path: Path, layout: str) -> None:
    # scan_history yields dicts holding only the keys each row logged.
    rows = [{"_step": s, "_runtime": s / 2, "train/loss": 4 - s / 100} for s in range(50)]
    rows[10]["eval/loss"] = 3.5
    rows[20]["train/loss"] = float("nan")
    path = tmp_path / ("history.jsonl" if layout == "jsonl" else "history.json")
    if layout == "records-json":
        path.write_text(json.dumps(rows))
    elif layout == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        pd.DataFrame(rows).to_json(path)
    assert HISTORY.can_read(path) and not GENERIC.can_read(path)

    read = HISTORY.read(path, path.name)

    assert series(read, "eval/loss")[0].tolist() == [10]
    steps, loss = series(read, "train/loss")
    if layout == "pandas-columns-json":
        assert 20 not in steps  # pandas writes NaN as null: indistinguishable from not logged
    else:
        assert math.isnan(loss[steps.tolist().index(20)])


def test_history_prefers_the_integrations_global_step_over_wandb_step(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rows = [{"_step": i, "train/global_step": 10 * i, "train/loss": 2.0 - i / 10} for i in range(5)]
    rows.append({"_step": 5, "custom": 1.0})  # a direct wandb.log without the step
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    read = HISTORY.read(path, "history.jsonl")

    assert series(read, "train/loss")[0].tolist() == [0, 10, 20, 30, 40]
    assert any("no usable step in 'train/global_step'" in p.problem for p in read.partial)


def test_history_of_exactly_500_rows_is_flagged_as_sampled(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    history_frame(500).to_csv(path, index=False)
    read = HISTORY.read(path, "history.csv")
    assert [c.kind for c in read.caveats] == ["sampled_history"]


def test_summary_file_is_not_a_history_dump(tmp_path: Path) -> None:
    path = tmp_path / "wandb-summary.json"
    path.write_text(json.dumps({"_step": 199, "_runtime": 3.2, "train/loss": 2.3}))
    assert not HISTORY.can_read(path)
    assert not GENERIC.can_read(path)
    assert not EXPORT.can_read(path)


@pytest.mark.parametrize(
    "content",
    ["", "_step,loss\n", "_step,_runtime\n1,2\n", "_step,loss\nx,y\nz,w\n"],
    ids=["empty", "header-only", "no-metric", "no-numbers"],
)
def test_history_unusable_dumps_raise_unreadable(tmp_path: Path, content: str) -> None:
    path = tmp_path / "history.csv"
    path.write_text(content)
    with pytest.raises(UnreadableInput):
        HISTORY.read(path, "history.csv")
