"""Red team round 9 (session 31): settings that cost more than the file holds (deep nesting of
long names, millions of hparams keys, thousands of random fields compared across runs) and a
column name that is not UTF-8. Each input is the smallest that showed the problem."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tscope.analyzers.cluster import cluster_runs
from tscope.ingest import settings_bound
from tscope.model.metric_names import LOSS
from tscope.pipeline import analyze_run
from tscope.render.formatting import MAX_CONFIG_ROWS, MAX_VALUE_CHARS, flatten


def _nested(depth: int, key_chars: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": 1}
    for level in range(depth):
        value = {chr(ord("a") + level % 26) * key_chars: value}
    return value


def test_the_config_table_of_a_deep_config_of_long_names_stays_small() -> None:
    # 60 levels of 20,000-character keys (1.2 MB): every level's dotted name was built whole
    # and alive at once, ~36 M characters before the cut (90 levels of 1 MB: 8 GB asked).
    config = _nested(60, 20_000)
    tracemalloc.start()
    rows = flatten(config, MAX_CONFIG_ROWS)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4_000_000, peak
    assert rows and all(len(name) <= MAX_VALUE_CHARS for name, _ in rows)


def test_the_config_table_counts_what_it_does_not_show() -> None:
    config = {f"group{g}": {f"k{i}": i for i in range(100)} for g in range(10)}
    rows = flatten(config, MAX_CONFIG_ROWS)
    assert len(rows) == MAX_CONFIG_ROWS + 1
    assert rows[-1] == ("…", f"{1000 - MAX_CONFIG_ROWS:,} more, listed in case.json")
    assert len(flatten(config)) == 1000  # evidence tables: every row


def _event_run(folder: Path, hparams: int, args: dict[str, object] | None = None) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for step in range(1, 61):
        writer.add_scalar("train/loss", 3.0 - step * 0.01, step)
    if args is not None:
        writer.add_text("args", json.dumps(args), 0)
    if hparams:
        writer.add_hparams({f"h{i}": float(i) for i in range(hparams)}, {"hparam/loss": 1.0})
    writer.close()
    return folder


def test_tensorboard_settings_past_the_bound_are_counted_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2,475,000 hparams keys (51 MB) once took 1.36 GB and made a 51 MB case.json.
    monkeypatch.setattr(settings_bound, "MAX_CONFIG_KEYS", 50)
    case, run = analyze_run(_event_run(tmp_path / "run", 80))
    assert len(run.config) == 50
    assert any("30 more settings not read" in p.problem for p in case.partial), case.partial
    assert run.series(LOSS)[1].size == 60


def test_a_deep_config_from_a_log_keeps_bounded_names_and_nesting(tmp_path: Path) -> None:
    # The Trainer's `args` text summary, 40 levels of 5,000-character keys.
    _, run = analyze_run(_event_run(tmp_path / "run", 0, args=_nested(40, 5_000)))
    assert run.config
    assert all(len(name) <= settings_bound.MAX_SETTING_NAME_CHARS for name in run.config)
    assert run.series(LOSS)[1].size == 60


def test_a_deep_config_is_cut_to_json_text_below_the_depth_bound() -> None:
    settings = settings_bound.BoundedSettings()
    settings.add("deep", _nested(20, 3))
    bounded = settings.kept["deep"]
    depth = 1
    while isinstance(bounded, dict):
        ((_, bounded),) = bounded.items()
        depth += 1
    assert depth == settings_bound.MAX_SETTING_DEPTH + 1
    assert isinstance(bounded, str) and bounded.startswith("{")


def test_a_wide_setting_value_counts_its_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    # A W&B config value may hold a million keys in one top-level setting.
    monkeypatch.setattr(settings_bound, "MAX_CONFIG_KEYS", 100)
    settings = settings_bound.BoundedSettings()
    settings.add("model", {f"k{i}": i for i in range(1000)})
    settings.add("lr", 0.1)
    assert len(settings.kept["model"]) == 100 and "lr" not in settings.kept
    assert settings.dropped == 901
    note = settings.partial_note()
    assert note is not None and note.startswith("901 more settings not read")


def test_settings_of_many_event_files_are_bounded_for_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each file kept its own 10,000; the run's config took them all.
    monkeypatch.setattr(settings_bound, "MAX_CONFIG_KEYS", 50)
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    run = tmp_path / "run"
    for part in range(3):  # a run relaunched twice: three event files in one folder
        writer = SummaryWriter(log_dir=str(run), filename_suffix=f".part{part}")
        for step in range(1, 61):
            writer.add_scalar("train/loss", 3.0 - step * 0.01, step + 60 * part)
        # What add_hparams writes, written into this run's own file.
        for summary in hparams({f"p{part}_{i}": float(i) for i in range(40)}, {"hparam/x": 1.0}):
            writer.file_writer.add_summary(summary)
        writer.close()
    case, read = analyze_run(run)
    assert len(read.config) <= 50
    assert any("more settings not read" in p.problem for p in case.partial), case.partial


def _profiles(runs: int, fields: int, seed: int = 0) -> list:
    from tests.test_cluster_analysis import blow_up, curve, profile

    rng = np.random.default_rng(seed)
    out = []
    for index in range(runs):
        values = curve(index)
        if index % 2:
            values = blow_up(values, 300)
        config = {f"h{k}": float(rng.random()) for k in range(fields)}
        out.append(profile(f"r{index}", values, config))
    return out


def test_a_split_expected_by_chance_among_many_settings_is_no_trait() -> None:
    # 5 runs against 5 with 1,000 random settings: ~8 separate them perfectly at random, and
    # "h3bf >= 0.5347 separates them" was the verdict.
    report = cluster_runs(_profiles(10, 1000))
    (cluster,) = report.clusters
    assert cluster.traits == ()
    assert "separates" not in report.summary["verdict"]
    assert any("may be chance" in line for line in report.limits), report.limits


def test_a_planted_setting_among_few_is_still_a_trait() -> None:
    from tests.test_cluster_analysis import sweep

    report = cluster_runs(sweep())
    assert report.clusters[0].traits[0].field == "learning_rate"
    assert not any("may be chance" in line for line in report.limits)


def test_a_stable_run_recording_text_where_members_record_numbers_is_compared() -> None:
    # "auto" in a stable run's learning rate once reached float(): a traceback in cluster.
    from tests.test_cluster_analysis import blow_up, curve, profile

    profiles = [
        profile(f"hot{i}", blow_up(curve(i), 300), {"lr": 0.01 * (i + 1)}) for i in range(3)
    ] + [
        profile(f"ok{i}", curve(10 + i), {"lr": value})
        for i, value in enumerate([1e-4, 2e-4, "auto", 3e-4])
    ]
    report = cluster_runs(profiles)
    assert report.clusters and report.clusters[0].traits[0].field == "lr"


def test_a_value_rule_is_judged_against_chance_too() -> None:
    # fp16 = True in 2 of 2 failed runs and 0 of 2 stable ones among 10 varying settings: a
    # split that 10 unrelated settings would match about 1.7 times.
    from tscope.analyzers.cluster.traits import chance_splits
    from tscope.model.cluster import Trait

    trait = Trait("fp16", "==", True, 1.0, (True, True), (False, False))
    assert chance_splits(trait, 2, 2, 10) > 1.0
    assert chance_splits(trait, 2, 2, 1) < 1.0
    many = Trait("fp16", "==", True, 1.0, (True,) * 6, (False,) * 6)
    assert chance_splits(many, 6, 6, 10) < 0.1


def test_the_settings_scored_across_runs_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from tscope.analyzers.cluster import traits

    monkeypatch.setattr(traits, "MAX_SCORED_FIELDS", 20)
    report = cluster_runs(_profiles(6, 50))
    assert any("50 settings vary" in line and "20 recorded" in line for line in report.limits)


def test_a_wide_csv_header_that_is_not_utf8_keeps_the_column_cap(tmp_path: Path) -> None:
    from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS

    run = tmp_path / "run"
    run.mkdir()
    names = ",".join(f"x{i}" for i in range(MAX_TABLE_COLUMNS + 500)).encode()
    header = b"step,loss,note_\xb5," + names + b"\n"
    row = ",".join(["1"] * (MAX_TABLE_COLUMNS + 503))
    body = "".join(f"{step},{3.0 - step * 1e-3:.4f}," + row[4:] + "\n" for step in range(1, 101))
    (run / "metrics.csv").write_bytes(header + body.encode())
    case, read = analyze_run(run)
    assert read.series(LOSS)[1].size == 100
    problems = [p.problem for p in case.partial]
    assert any("columns not read" in p for p in problems), problems
    assert any("not UTF-8" in p for p in problems), problems


def test_a_csv_header_that_is_not_utf8_is_read_with_replacement(tmp_path: Path) -> None:
    # One latin-1 byte in a column name refused all 2,000 good rows ("Nothing analyzable").
    run = tmp_path / "run"
    run.mkdir()
    rows = "".join(f"{step},{3.0 - step * 1e-4:.4f},1\n" for step in range(1, 2001))
    (run / "metrics.csv").write_bytes(b"step,loss,note_\xb5\n" + rows.encode())
    case, read = analyze_run(run)
    assert read.series(LOSS)[1].size == 2000
    assert any("not UTF-8" in p.problem for p in case.partial), case.partial
