"""The accuracy benchmark's machinery on a few small fixed runs (bench/accuracy/, docs/accuracy.md).

The runs are `smoke_runs.smoke_specs()` minus Lightning (its import alone is most of a small run): a
nanoGPT-style run with an LR ×30 jump, a nanoGPT-style control, and a Trainer GPT-2 run whose
whole batch is corrupted. They are trained once per session into a temporary cache by the
benchmark's own generator, then scored by its scorer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import causes  # noqa: E402
import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
import report  # noqa: E402
from generate import generate, run_folder  # noqa: E402
from schedules import multiplier  # noqa: E402
from score import RunScore, score_run  # noqa: E402
from smoke_runs import smoke_specs  # noqa: E402
from spec import CONTROL, HOLDOUT_INDEX, SMOKE_INDEX, SPLITS, build_specs, select  # noqa: E402

pytest.importorskip("transformers")

SMOKE = [s for s in smoke_specs() if s.producer != "lightning"]


@pytest.fixture(scope="session")
def smoke_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("tscope-bench")
    failures = generate(cache, SMOKE, jobs=2, verbose=False)
    assert failures == []
    return cache


@pytest.fixture(scope="session")
def smoke_scores(smoke_cache: Path) -> dict[str, RunScore]:
    return {spec.name: score_run(str(run_folder(smoke_cache, spec))) for spec in SMOKE}


def test_the_specs_are_enough_and_split_by_seed():
    specs = build_specs()
    planted = [s for s in specs if s.cause != CONTROL]
    controls = [s for s in specs if s.cause == CONTROL]
    assert len(planted) >= 120 and len(controls) >= 40
    assert len({s.name for s in specs}) == len(specs)
    assert len({s.key for s in specs}) == len(specs)
    first = [s for s in specs if s.index < HOLDOUT_INDEX]
    assert all(s.split == ("dev" if s.seed % 2 == 0 else "test") for s in first)
    # held-out blocks past SMOKE_INDEX skip the smoke runs' indices (90-99: the tests' own runs)
    assert not [s for s in specs if SMOKE_INDEX <= s.index < SMOKE_INDEX + 10]
    by_split = {split: select(specs, split) for split in SPLITS}
    assert sum(len(runs) for runs in by_split.values()) == len(specs)
    for runs in by_split.values():
        assert {s.cause for s in runs} == {s.cause for s in by_split["dev"]}
        assert {s.producer for s in runs} == {s.producer for s in by_split["dev"]}
    # each held-out split holds new runs, not copies of tuned ones or of another split's
    for split, runs in by_split.items():
        others = [s for other, rest in by_split.items() if other != split for s in rest]
        assert not {s.key for s in runs} & {s.key for s in others}


def test_every_cause_has_a_mapping_and_a_window():
    for spec in build_specs():
        if spec.cause == CONTROL:
            continue
        assert causes.accepted(spec)
        low, high = causes.step_window(spec)
        assert low <= (spec.planted_step or 0) + 1 and high >= low


def test_a_spec_change_is_a_new_cache_key():
    spec = build_specs()[0]
    assert replace(spec, peak_lr=spec.peak_lr * 2).key != spec.key


def test_the_ground_truth_sits_next_to_each_run(smoke_cache: Path):
    for spec in SMOKE:
        folder = run_folder(smoke_cache, spec)
        truth = json.loads((folder / "truth.json").read_text(encoding="utf-8"))
        assert truth["producer"] == spec.producer
        assert truth["split"] == "smoke"
        assert truth["cause"] == (None if spec.cause == CONTROL else spec.cause)
        assert truth["step"] == spec.planted_step
        assert (folder / "run").is_dir() and not (folder / "run" / "truth.json").exists()


def test_a_rerun_trains_nothing(smoke_cache: Path):
    before = {p: p.stat().st_mtime_ns for p in smoke_cache.rglob("truth.json")}
    assert generate(smoke_cache, SMOKE, jobs=1, verbose=False) == []
    assert {p: p.stat().st_mtime_ns for p in smoke_cache.rglob("truth.json")} == before


def test_the_nanogpt_log_holds_the_planted_lr_jump(smoke_cache: Path):
    spec = SMOKE[0]
    rows = [
        json.loads(line)
        for line in (run_folder(smoke_cache, spec) / "run" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    lr = {row["iter"]: row["lr"] for row in rows}
    jump = spec.planted_step
    assert jump is not None
    unplanted = replace(spec, cause=CONTROL, plant={})
    for iteration, value in lr.items():  # iteration i is optimizer step i+1
        base = spec.peak_lr * multiplier(unplanted, iteration + 1)
        planted = jump <= iteration < jump + 3
        assert value == pytest.approx(base * (30.0 if planted else 1.0), rel=1e-6, abs=1e-12)


def test_the_smoke_runs_are_diagnosed_right(smoke_scores: dict[str, RunScore]):
    """Right on main when this test was written (12:50 UTC, 2026-12-01): the LR jump is the
    headline at its step, the control is healthy, the corrupted batch is "most likely a bad
    batch" at its step."""
    lr_jump, control, bad_batch = (smoke_scores[s.name] for s in SMOKE)
    assert lr_jump.headline.category == "lr_schedule_jump"
    assert lr_jump.headline.step == SMOKE[0].planted_step
    assert lr_jump.right
    assert control.headline.status == "healthy" and control.alerts == [] and control.right
    assert bad_batch.headline.category == "bad_batch"
    assert abs(bad_batch.headline.step - SMOKE[2].planted_step) <= 1
    assert bad_batch.right
    # The whole batch replaced by random tokens stands far out of the log by the own measure.
    assert bad_batch.visibility is not None and bad_batch.visibility > 10
    assert bad_batch.largest_excursion


def test_a_wrong_headline_is_scored_wrong(smoke_scores: dict[str, RunScore]):
    """The scorer can fail a run: the same LR-jump headline judged against another cause or
    another step is wrong."""
    spec = SMOKE[0]
    headline = smoke_scores[spec.name].headline
    assert causes.cause_is_right(spec, headline.category, headline.step, headline.source)
    assert not causes.cause_is_right(spec, headline.category, headline.step + 5, headline.source)
    as_bad_batch = replace(
        spec, cause="bad_batch", plant={"step": 40, "rows": 1, "of_rows": 8, "generator_seed": 1}
    )
    assert not causes.cause_is_right(
        as_bad_batch, headline.category, headline.step, headline.source
    )


def test_the_report_names_the_split(smoke_scores: dict[str, RunScore]):
    runs = list(smoke_scores.values())
    lines = report.markdown(runs, [], "smoke", "")
    assert lines[0].startswith("Split scored: **smoke** — 3 runs (2 planted, 1 controls)")
    text = "\n".join(lines)
    assert "| nanogpt |" in text and "| trainer_gpt2 |" in text
