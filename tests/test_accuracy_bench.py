"""The accuracy benchmark's machinery on a few small fixed runs (bench/accuracy/, docs/accuracy.md).

The runs are `spec.smoke_specs()` minus Lightning (its import alone is most of a small run): a
nanoGPT-style run with an LR ×30 jump, a nanoGPT-style control, and a Trainer GPT-2 run whose
whole batch is corrupted. They are trained once per session into a temporary cache by the
benchmark's own generator, then scored by its scorer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import causes  # noqa: E402
import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
import report  # noqa: E402
from generate import generate, run_folder  # noqa: E402
from score import score_run  # noqa: E402
from spec import CONTROL, build_specs, select, smoke_specs  # noqa: E402

pytest.importorskip("transformers")

SMOKE = [s for s in smoke_specs() if s.producer != "lightning"]


@pytest.fixture(scope="session")
def smoke_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("tscope-bench")
    failures = generate(cache, SMOKE, jobs=2, verbose=False)
    assert failures == []
    return cache


@pytest.fixture(scope="session")
def smoke_scores(smoke_cache: Path) -> dict[str, object]:
    return {spec.name: score_run(str(run_folder(smoke_cache, spec))) for spec in SMOKE}


def test_the_specs_are_enough_and_split_by_seed():
    specs = build_specs()
    planted = [s for s in specs if s.cause != CONTROL]
    controls = [s for s in specs if s.cause == CONTROL]
    assert len(planted) >= 120 and len(controls) >= 40
    assert len({s.name for s in specs}) == len(specs)
    assert len({s.key for s in specs}) == len(specs)
    assert all(s.split == ("dev" if s.seed % 2 == 0 else "test") for s in specs)
    dev, test = select(specs, "dev"), select(specs, "test")
    assert len(dev) + len(test) == len(specs)
    assert {s.cause for s in dev} == {s.cause for s in test}
    assert {s.producer for s in dev} == {s.producer for s in test}


def test_every_cause_has_a_mapping_and_a_window():
    for spec in build_specs():
        if spec.cause == CONTROL:
            continue
        assert causes.accepted(spec)
        low, high = causes.step_window(spec)
        assert low <= (spec.planted_step or 0) + 1 and high >= low


def test_a_spec_change_is_a_new_cache_key():
    spec = build_specs()[0]
    from dataclasses import replace

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
    assert lr[jump] == pytest.approx(lr[jump - 1] * 30.0, rel=0.05)
    assert lr[jump + 3] == pytest.approx(lr[jump + 2] / 30.0, rel=0.05)


def test_the_scorer_reports_each_smoke_run(smoke_scores: dict[str, object]):
    lr_jump, control, bad_batch = (smoke_scores[s.name] for s in SMOKE)
    # What the current analysis says about these runs (measured when this test was written).
    assert lr_jump.headline.category == "lr_schedule_jump" and lr_jump.right
    assert control.cause == CONTROL
    assert control.right == (control.headline.status != "incident")
    assert bad_batch.headline.status == "incident"
    assert bad_batch.right == causes.cause_is_right(
        SMOKE[2],
        bad_batch.headline.category or "",
        bad_batch.headline.step,
        bad_batch.headline.source,
    )


def test_the_report_names_the_split(smoke_scores: dict[str, object]):
    runs = list(smoke_scores.values())
    lines = report.markdown(runs, [], "smoke", "")
    assert lines[0].startswith("Split scored: **smoke** — 3 runs (2 planted, 1 controls)")
    text = "\n".join(lines)
    assert "| nanogpt |" in text and "| trainer_gpt2 |" in text
