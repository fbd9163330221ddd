"""The numpy metric table (tscope/model/metric_table.py) orders, groups and merges rows as the
pandas DataFrame it replaced did: the same split into series, the same sort, the same codes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tscope.model import LogRead, MetricTable, Run, TextColumn
from tscope.model.metric_table import first_seen_codes, sorted_unique


def _random_table(rng: np.random.Generator, size: int) -> MetricTable:
    names = ["train/loss", "eval/loss", "b", "a", "train/grad_norm", "Z"]
    return MetricTable(
        rng.integers(0, 30, size),
        TextColumn(rng.integers(0, len(names), size), names),
        rng.normal(size=size),
        TextColumn(rng.integers(0, 2, size), ["x.csv", "y.jsonl"]),
        [f"orig {code}" for code in rng.integers(0, 4, size)],
        rng.permutation(size),
    )


def test_sorted_by_is_a_stable_pandas_sort() -> None:
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 200):
        table = _random_table(rng, size)
        frame = table.to_frame()
        for keys in (["metric", "step"], ["order"], ["source", "value"]):
            expected = frame.sort_values(keys, kind="stable").reset_index(drop=True)
            got = table.sorted_by(*keys).to_frame()
            pd.testing.assert_frame_equal(got, expected)


def test_sorted_by_on_rows_already_in_order_is_the_same_sort() -> None:
    """sorted_by returns the table itself when its rows already are in order; it must be what
    sorting gives, with ties on the first key, NaN values and equal steps."""
    rng = np.random.default_rng(3)
    for size in (0, 1, 2, 50, 300):
        table = _random_table(rng, size)
        table.value[rng.random(size) < 0.1] = np.nan
        for keys in (["metric", "step"], ["order"], ["source", "value"], ["step"]):
            ordered = table.sorted_by(*keys)
            again = ordered.sorted_by(*keys)
            if not np.isnan(ordered.value).any() or "value" not in keys:
                assert again is ordered  # already in order: not copied
            assert again.equals(ordered.take(ordered.sort_order(*keys)))
            pd.testing.assert_frame_equal(
                again.to_frame(),
                ordered.to_frame().sort_values(keys, kind="stable").reset_index(drop=True),
            )


def test_run_series_is_the_pandas_split() -> None:
    rng = np.random.default_rng(1)
    table = _random_table(rng, 500)
    run = Run(name="r", path="r", sources=(), metrics=table)
    frame = table.to_frame()
    assert run.metric_names == sorted(frame["metric"].unique())
    for metric, rows in frame.sort_values(["metric", "step"], kind="stable").groupby("metric"):
        steps, values = run.series(str(metric))
        assert steps.tolist() == rows["step"].tolist()
        assert values.tolist() == rows["value"].tolist()
    assert run.first_step == frame["step"].min() and run.last_step == frame["step"].max()


def test_equal_labels_share_a_code_and_concat_merges_labels() -> None:
    column = TextColumn(np.array([0, 1, 2, 1]), ["a", "b", "a"])
    assert column.labels == ("a", "b") and column.codes.tolist() == [0, 1, 0, 1]
    merged = TextColumn.concat([column, TextColumn(np.array([0, 1]), ["c", "a"])])
    assert merged.texts().tolist() == ["a", "b", "a", "b", "c", "a"]
    assert merged.labels == ("a", "b", "c")


def test_rows_to_table_round_trips_through_pandas() -> None:
    rows = [
        (3, "train/loss", 2.0, "loss"),
        (1, "train/loss", np.nan, "loss"),
        (2, "lr", 1e-3, "lr"),
    ]
    table = LogRead.rows_to_table(rows, "log.txt")
    frame = table.to_frame()
    assert frame["metric"].tolist() == ["train/loss", "train/loss", "lr"]
    assert frame["source"].tolist() == ["log.txt"] * 3
    assert frame["order"].tolist() == [0, 1, 2]
    assert MetricTable.from_frame(frame).equals(table)
    assert table.take(np.array([False, True, True])).equals(table[np.array([1, 2])])
    assert MetricTable.no_rows().empty and len(LogRead.rows_to_table([], "x")) == 0


def test_first_seen_codes_is_pandas_factorize() -> None:
    rng = np.random.default_rng(2)
    for size in (0, 1, 50, 5000):
        values = rng.integers(0, 40, size).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        codes, distinct = first_seen_codes(values)
        expected_codes, expected_distinct = pd.factorize(values)
        assert codes.tolist() == expected_codes.tolist()
        assert distinct.tolist() == list(expected_distinct)


def test_assembly_keeps_a_read_without_rows_out_of_the_way() -> None:
    from tscope.ingest.assemble import assemble_run

    empty = LogRead(kind="synthetic", path="empty.jsonl")
    rows = [(1, "train/loss", 2.0, "loss"), (2, "train/loss", 1.9, "loss")]
    full = LogRead(kind="synthetic", path="log.jsonl", metrics=LogRead.rows_to_table(rows, "log"))
    run = assemble_run("r", "/r", [empty, full], [])
    assert run.metric_names == ["train/loss"]
    assert run.series("train/loss")[1].tolist() == [2.0, 1.9]
    assert assemble_run("r", "/r", [empty], []).metrics.empty


@pytest.mark.parametrize(
    "values",
    [
        np.array([], dtype=np.int64),
        np.array([5, 1, 5, 3, 1, -2], dtype=np.int64),
        np.repeat(np.arange(0, 300_000, 3, dtype=np.int64), 2)[::-1],
        np.array([True, False, True]),
        np.array([1.5, np.nan, -0.0, 0.0, np.nan, 1.5]),  # not integers: np.unique itself
    ],
)
def test_sorted_unique_is_np_unique(values: np.ndarray) -> None:
    expected = np.unique(values)
    got = sorted_unique(values)
    assert got.dtype == expected.dtype
    assert np.array_equal(got, expected, equal_nan=values.dtype.kind == "f")


@pytest.mark.parametrize(
    "parts_steps",
    [[[0, 1, 2, 5]], [[0, 1, 2], [3, 7]], [[0, 1, 2], [1, 2, 3]], [[0, 2, 2, 4]], [[5]], [[]]],
)
def test_resolved_segments_keep_the_latest_row_per_step(parts_steps: list[list[int]]) -> None:
    """_resolve_segments takes every row as it is when each step comes once and in order (no
    sort); otherwise the latest row per step: both as the general rule says."""
    from tscope.ingest.assemble import _resolve_segments

    parts = [
        MetricTable(
            np.asarray(steps, dtype=np.int64),
            "loss",
            np.arange(len(steps), dtype=np.float64) + 10 * number,
            f"file{number}",
            "loss",
            np.arange(len(steps), dtype=np.int64),
        )
        for number, steps in enumerate(parts_steps)
    ]
    table, _ = _resolve_segments(parts, "loss")
    rows = [
        (step, value) for part in parts for step, value in zip(part.step, part.value, strict=True)
    ]
    latest = {int(step): float(value) for step, value in rows}  # later rows win
    kept_in_order = [
        (step, value)
        for position, (step, value) in enumerate(rows)
        if all(int(other) != int(step) for other, _ in rows[position + 1 :])
    ]
    assert [(int(s), float(v)) for s, v in zip(table.step, table.value, strict=True)] == [
        (int(s), float(v)) for s, v in kept_in_order
    ]
    assert {int(s): float(v) for s, v in zip(table.step, table.value, strict=True)} == latest


@pytest.mark.parametrize("seed", range(4))
def test_assembly_in_metric_order_is_the_sorted_table(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """assemble_run concatenates one read's metrics by name so that the (metric, step) sort is
    usually already done: the same table, labels included, as concatenating in first-appearance
    order and sorting; with steps out of order, repeated steps, and a second read's labels."""
    from tscope.ingest import assemble

    rng = np.random.default_rng(seed)
    names = ["train/loss", "eval/loss", "b", "a", "train/grad_norm", "Z"]

    def read(path: str, size: int, in_order: bool) -> LogRead:
        steps = np.sort(rng.integers(0, 60, size)) if in_order else rng.integers(0, 60, size)
        rows = [
            (int(step), names[int(code)], float(value), f"orig {code}")
            for step, code, value in zip(
                steps, rng.integers(0, len(names), size), rng.normal(size=size), strict=True
            )
        ]
        return LogRead(kind="synthetic", path=path, metrics=LogRead.rows_to_table(rows, path))

    for reads in (
        [read("a.jsonl", 300, True)],
        [read("a.jsonl", 300, False)],
        [read("a.jsonl", 200, True), read("b.jsonl", 100, True)],
    ):
        ordered = assemble.assemble_run("r", "/r", reads, []).metrics
        with monkeypatch.context() as patched:
            patched.setattr(assemble, "_in_metric_order", lambda tables: tables)
            plain = assemble.assemble_run("r", "/r", reads, []).metrics
        assert ordered.equals(plain)
        for column in ("metric", "source", "original_name"):
            assert getattr(ordered, column).labels == getattr(plain, column).labels
            assert np.array_equal(getattr(ordered, column).codes, getattr(plain, column).codes)
