"""`tscope demo`'s training half: a real tiny GPT run with a planted learning-rate jump.

One short run (200 steps, ~5-15 s on 2 cores) is shared by the tests of this module.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from tscope.demo.corpus import Corpus, load_corpus
from tscope.demo.run_folder import (
    LOG_NAME,
    MARKER_NAME,
    METRICS_NAME,
    checkpoint_name,
    prepare_run_dir,
)
from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig
from tscope.demo.train import DemoRun, make_demo_run
from tscope.errors import UsageError

TEST_STEPS = 200  # the shortest run whose spike still recovers before the end (measured)
BASELINE_STEPS = 40  # steps before the window that form the pre-spike baseline
ITER_LINE = re.compile(r"^iter (\d+): loss (\d+\.\d{4}), time \d+\.\d{2}ms, mfu -?\d+\.\d{2}%$")
EVAL_LINE = re.compile(r"^step (\d+): train loss (\d+\.\d{4}), val loss (\d+\.\d{4})$")


@pytest.fixture(scope="module")
def demo_with_progress(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[DemoRun, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []
    demo = make_demo_run(
        tmp_path_factory.mktemp("demo") / "run",
        steps=TEST_STEPS,
        progress=lambda done, total: calls.append((done, total)),
    )
    return demo, calls


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


@pytest.fixture(scope="module")
def demo(demo_with_progress: tuple[DemoRun, list[tuple[int, int]]]) -> DemoRun:
    return demo_with_progress[0]


def _metric_rows(demo: DemoRun) -> list[dict[str, Any]]:
    text = (demo.run_dir / METRICS_NAME).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _train_losses(demo: DemoRun) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in _metric_rows(demo) if "train/loss" in r}


def test_demo_leaves_a_nanogpt_style_run_dir(
    demo_with_progress: tuple[DemoRun, list[tuple[int, int]]],
) -> None:
    demo, progress_calls = demo_with_progress
    assert demo.planted_step == TEST_STEPS // 2
    assert demo.lr_factor == 20.0
    names = {p.name for p in demo.run_dir.iterdir()}
    assert {LOG_NAME, METRICS_NAME, MARKER_NAME} <= names
    assert sum(name.startswith("ckpt_") for name in names) >= 4
    marker = json.loads((demo.run_dir / MARKER_NAME).read_text(encoding="utf-8"))
    assert set(marker["files"]) | {MARKER_NAME} == names, "the marker must list every file written"

    log_lines = (demo.run_dir / LOG_NAME).read_text(encoding="utf-8").splitlines()
    assert log_lines[0].startswith("Overriding config with ")
    assert "learning_rate = 0.003" in log_lines
    assert f"max_iters = {TEST_STEPS}" in log_lines
    assert progress_calls[0] == (1, TEST_STEPS)
    assert progress_calls[-1] == (TEST_STEPS, TEST_STEPS)
    assert len(progress_calls) == TEST_STEPS


def test_train_log_and_metrics_jsonl_tell_the_same_story(demo: DemoRun) -> None:
    log_lines = (demo.run_dir / LOG_NAME).read_text(encoding="utf-8").splitlines()
    logged = {int(m[1]): float(m[2]) for line in log_lines if (m := ITER_LINE.match(line))}
    evals = {int(m[1]): float(m[3]) for line in log_lines if (m := EVAL_LINE.match(line))}
    rows = _metric_rows(demo)
    train = {r["step"]: r for r in rows if "train/loss" in r}
    eval_rows = {r["step"]: r["eval/loss"] for r in rows if "eval/loss" in r}

    # nanoGPT counts iterations from 0; the last evaluation sees the state after every update.
    assert sorted(logged) == sorted(train) == list(range(TEST_STEPS))
    assert min(evals) == 0 and max(evals) == TEST_STEPS
    assert evals.keys() == eval_rows.keys()
    for step, loss in logged.items():
        assert loss == pytest.approx(train[step]["train/loss"], abs=6e-5)
        assert set(train[step]) == {"step", "train/loss", "train/grad_norm", "train/learning_rate"}
    for step, val_loss in evals.items():
        assert val_loss == pytest.approx(eval_rows[step], abs=6e-5)


def test_loss_spikes_right_after_the_planted_lr_jump_and_recovers(demo: DemoRun) -> None:
    rows = {r["step"]: r for r in _metric_rows(demo) if "train/loss" in r}
    losses = {step: row["train/loss"] for step, row in rows.items()}
    planted = demo.planted_step
    normal_lr = rows[planted - 1]["train/learning_rate"]
    for step in demo.window:
        assert rows[step]["train/learning_rate"] == pytest.approx(normal_lr * demo.lr_factor)
    assert rows[demo.window.stop]["train/learning_rate"] == pytest.approx(normal_lr)

    baseline = [losses[s] for s in range(planted - BASELINE_STEPS, planted)]
    median = statistics.median(baseline)
    robust_sigma = 1.4826 * statistics.median(abs(x - median) for x in baseline)
    # The loss at the planted step is measured before its update: the cause precedes the effect.
    assert losses[planted] < median + 4 * robust_sigma
    after = range(planted + 1, demo.window.stop + 4)
    peak_step = max(after, key=lambda s: losses[s])
    peak = losses[peak_step]
    assert peak > median + 0.5, f"peak {peak:.3f} at step {peak_step}, baseline {median:.3f}"
    assert (peak - median) / robust_sigma > 7
    # Recovered: the last 20 steps are back near the baseline, far below the peak.
    tail = statistics.median(losses[s] for s in range(TEST_STEPS - 20, TEST_STEPS))
    assert tail < median + 3 * robust_sigma
    assert tail < median + 0.25 * (peak - median)


def test_checkpoints_bracket_the_window_and_load_with_weights_only(demo: DemoRun) -> None:
    checkpoints = sorted(demo.run_dir.glob("ckpt_*.pt"))
    steps = [int(p.stem.removeprefix("ckpt_")) for p in checkpoints]
    before = [s for s in steps if demo.planted_step - 4 <= s <= demo.planted_step - 2]
    after = [s for s in steps if demo.window.stop + 2 <= s <= demo.window.stop + 4]
    assert before and after, f"checkpoints at {steps}, window {demo.window}"
    for path, step in zip(checkpoints, steps, strict=True):
        checkpoint = torch.load(path, weights_only=True)
        assert set(checkpoint) == {
            "model",
            "optimizer",
            "model_args",
            "iter_num",
            "best_val_loss",
            "config",
        }
        assert checkpoint["iter_num"] == step
        assert checkpoint["config"]["max_iters"] == TEST_STEPS
        assert "transformer.h.0.attn.c_attn.weight" in checkpoint["model"]
        adam_state = checkpoint["optimizer"]["state"]
        assert len(adam_state) == len(
            list(TinyGPT(TinyGPTConfig(**checkpoint["model_args"])).parameters())
        )
        assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())


def test_checkpoint_holds_the_state_just_before_the_update_of_its_step(
    demo: DemoRun, corpus: Corpus
) -> None:
    # nanoGPT's convention: ckpt iter_num N is saved before update N, so its weights reproduce
    # the loss logged for step N on step N's batch.
    step = demo.planted_step - 3
    checkpoint = torch.load(demo.run_dir / checkpoint_name(step), weights_only=True)
    model = TinyGPT(TinyGPTConfig(**checkpoint["model_args"]))
    model.load_state_dict(checkpoint["model"])
    config = checkpoint["config"]
    inputs, targets = corpus.batch(
        "train",
        index=step,
        seed=config["seed"],
        batch_size=config["batch_size"],
        block_size=config["block_size"],
    )
    with torch.no_grad():
        _, loss = model(inputs, targets)
    assert loss is not None
    assert loss.item() == pytest.approx(_train_losses(demo)[step], abs=1e-5)


def test_rerun_replaces_an_earlier_demo_but_never_touches_foreign_files(
    demo: DemoRun, tmp_path: Path
) -> None:
    earlier = tmp_path / "earlier"
    shutil.copytree(demo.run_dir, earlier)
    prepare_run_dir(earlier)
    assert list(earlier.iterdir()) == []

    mixed = tmp_path / "mixed"
    shutil.copytree(demo.run_dir, mixed)
    (mixed / "notes.txt").write_text("mine\n")
    before = sorted(p.name for p in mixed.iterdir())
    with pytest.raises(UsageError, match=r"notes\.txt"):
        prepare_run_dir(mixed)
    assert sorted(p.name for p in mixed.iterdir()) == before

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "train.log").write_text("someone else's run\n")
    with pytest.raises(UsageError, match="did not write"):
        make_demo_run(foreign, steps=TEST_STEPS)
    assert (foreign / "train.log").read_text() == "someone else's run\n"


def test_too_short_a_demo_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="at least"):
        make_demo_run(tmp_path / "short", steps=10)
    assert not (tmp_path / "short").exists()


def test_batches_are_a_pure_function_of_stream_index_and_seed(corpus: Corpus) -> None:
    shape = {"batch_size": 4, "block_size": 16}
    first = corpus.batch("train", index=5, seed=0, **shape)
    again = corpus.batch("train", index=5, seed=0, **shape)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert first[0].shape == (4, 16)
    assert torch.equal(first[0][:, 1:], first[1][:, :-1]), "targets are inputs shifted by one"
    assert not torch.equal(first[0], corpus.batch("train", index=6, seed=0, **shape)[0])
    assert not torch.equal(first[0], corpus.batch("train", index=5, seed=1, **shape)[0])
    assert not torch.equal(first[0], corpus.batch("eval_train", index=5, seed=0, **shape)[0])
    assert corpus.vocabulary.size < 100
    assert corpus.vocabulary.decode(corpus.vocabulary.encode("Return the value.")) == (
        "Return the value."
    )
