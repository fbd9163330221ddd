"""Rules fixed on bench/synthetic_logs.py (logs no producer of the benchmark writes): each test
plants the shape that was misread, and its healthy counterpart where a false alarm was the defect.

- A divergence is dated where its climb began, not where the smoothed loss crossed 1.5× its best.
- The untrained level counts as weights lost only when the loss gets there at once.
- A rise under +10% in the last points of a log is no warning.
- repeated_data's chance bound reads the run's own persistence of repeat-like points.
- Resumes: an isolated step logged twice is one; the LR after it is compared with what the run
  logged at that step before the rewind, or with its trend; the level before it is its last
  points; a loss jump needs +10% over that level.
"""

from __future__ import annotations

import numpy as np

from tests.synthetic import grad_norms, loss_curve, make_run, warmup_cosine
from tscope.analyzers.explainers.divergence import divergence_onset
from tscope.analyzers.explainers.repeated_data import repetitions
from tscope.analyzers.impact import back_at_initial
from tscope.analyzers.repetition_chance import (
    PERSISTENCE_BLOCK_POINTS,
    PERSISTENCE_MIN_BLOCKS,
    PERSISTENCE_PSEUDO_COUNTS,
    FlagCounts,
)
from tscope.ingest.assemble import assemble_run
from tscope.model import LogRead, Run
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.model.run import RELOGGED_KEY
from tscope.pipeline import build_case


def _alerts(run: Run) -> list[tuple[str, int | None]]:
    case = build_case(run, [])
    return [(f.category, f.step) for f in case.findings if f.severity in ("warning", "critical")]


def _rows_run(rows: list[tuple[int, str, float]]) -> Run:
    """A run from (step, metric, value) rows in the order a log file holds them."""
    table = LogRead.rows_to_table([(s, m, v, m) for s, m, v in rows], "log.jsonl")
    read = LogRead(kind="synthetic", path="log.jsonl", metrics=table)
    return assemble_run("synthetic", "/synthetic", [read], [])


def test_a_divergence_is_dated_where_its_climb_began() -> None:
    loss = loss_curve(600, seed=3, noise=0.01)
    onset = 400
    loss[onset:] *= 1 + np.expm1(np.minimum(0.05 * np.arange(600 - onset), 3.0))
    steps = np.arange(1, 601)
    found = divergence_onset(steps, loss)
    assert found is not None
    crossing = onset + int(np.log(1.5) / 0.05)  # where the clean climb reaches 1.5×
    assert onset <= int(steps[found[0]]) <= onset + 4 < crossing
    case = build_case(make_run({LOSS: loss}), [])
    (divergence,) = [f for f in case.findings if f.category == "loss_divergence"]
    assert divergence.step == int(steps[found[0]])
    assert divergence.evidence["crossing_step"] > divergence.step
    assert f"at step {divergence.evidence['crossing_step']}" in divergence.message


def test_autocorrelated_noise_does_not_pull_the_onset_back() -> None:
    rng = np.random.default_rng(5)
    n, onset = 3000, 2500
    wander = np.zeros(n)
    for i in range(1, n):
        wander[i] = 0.9 * wander[i - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    loss = (2.5 + 2.0 * np.exp(-np.arange(n) / 300)) * (1 + 0.05 * wander)
    loss[onset:] = np.nan
    found = divergence_onset(np.arange(1, n + 1), loss)
    assert found is not None and found[0] == onset


def test_a_climb_through_the_untrained_level_is_not_weights_lost() -> None:
    initial, level = 10.0, 3.0
    climb = np.array([3.3, 4.0, 5.5, 7.5, 9.8, 10.5, 10.9, 11.0])
    assert not back_at_initial(initial, level, climb)
    assert back_at_initial(initial, level, np.r_[10.1, climb[::-1]])


def test_a_small_rise_at_the_end_of_a_log_is_no_warning() -> None:
    loss = loss_curve(400, seed=1, noise=0.002)
    loss[-1] *= 1.04  # far above the tiny noise, but +4%
    assert _alerts(make_run({LOSS: loss, GRAD_NORM: grad_norms(400, 1)})) == []


def test_autocorrelated_noise_is_no_repetition() -> None:
    """Healthy logs whose batch noise wanders (AR(1), as sequential data gives) flag points in
    runs; counted as independent, chance stretches read as repeated batches."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        n = 4000
        wander = np.zeros(n)
        for i in range(1, n):
            wander[i] = 0.8 * wander[i - 1] + 0.6 * rng.standard_normal()
        noise = 0.7 * wander + 0.7 * rng.standard_normal(n)
        loss = (2.5 + 2.0 * np.exp(-np.arange(n) / 400)) * (1 + 0.06 * noise)
        assert [r for r in repetitions(np.arange(1, n + 1), loss)] == [], seed


def test_a_step_logged_twice_is_a_resume_and_its_lr_is_compared_with_the_first_attempt() -> None:
    rows: list[tuple[int, str, float]] = []
    lr = warmup_cosine(300, peak=1e-3, warmup=20)
    loss = loss_curve(300, seed=2)
    for step in range(1, 201):
        rows += [(step, LOSS, float(loss[step - 1])), (step, LEARNING_RATE, float(lr[step - 1]))]
    # Resumed from the checkpoint at 199: step 200 logged again, the scheduler restored.
    for step in range(200, 301):
        rows += [(step, LOSS, float(loss[step - 1]) * 1.01), (step, LEARNING_RATE, lr[step - 1])]
    run = _rows_run(rows)
    (event,) = run.events_of("resume")
    assert event.step == 200 and event.numbers[RELOGGED_KEY + LEARNING_RATE] == lr[199]
    assert ("resume_discontinuity", 200) not in _alerts(run)
    # The same resume with the LR restarted from the warm-up: the first attempt's LR says so.
    restarted = [
        (s, m, float(lr[s - 200]) if m == LEARNING_RATE and s >= 200 and i >= 400 else v)
        for i, (s, m, v) in enumerate(rows)
    ]
    assert ("resume_discontinuity", 200) in _alerts(_rows_run(restarted))


def test_a_resume_inside_the_warm_up_is_no_lr_jump() -> None:
    lr = warmup_cosine(200, peak=1e-3, warmup=40)
    loss = loss_curve(200, seed=4)
    rows: list[tuple[int, str, float]] = []
    for step in range(1, 31):
        rows += [(step, LOSS, float(loss[step - 1])), (step, LEARNING_RATE, float(lr[step - 1]))]
    for step in range(11, 201):  # back to the checkpoint at 10, everything restored
        rows += [(step, LOSS, float(loss[step - 1])), (step, LEARNING_RATE, float(lr[step - 1]))]
    run = _rows_run(rows)
    assert [e.step for e in run.events_of("resume")] == [11]
    assert _alerts(run) == []


def test_weights_lost_while_the_loss_still_fell_fast() -> None:
    """The level before the resume is its last points, not the median of a falling window."""
    first = loss_curve(300, seed=6, noise=0.005)
    rows: list[tuple[int, str, float]] = []
    for step in range(1, 121):
        rows.append((step, LOSS, float(first[step - 1])))
    for offset, step in enumerate(range(100, 300)):  # resumed at 100 from a fresh model
        rows.append((step, LOSS, float(first[offset])))
    case = build_case(_rows_run(rows), [])
    (resume,) = [f for f in case.findings if f.category == "resume_discontinuity"]
    assert resume.severity == "critical" and resume.step == 100
    assert resume.evidence["weights_lost"] is True


def test_a_divergence_with_no_cause_in_reach_is_undetermined_not_its_own_cause() -> None:
    loss = loss_curve(600, seed=3, noise=0.01)
    loss[400:] *= 1 + np.expm1(np.minimum(0.05 * np.arange(200), 3.0))
    case = build_case(make_run({LOSS: loss, LEARNING_RATE: np.full(600, 3e-4)}), [])
    card = case.summary.card
    assert card is not None and card.severity == "critical"
    assert card.cause.category == "undetermined" and card.cause.confidence == 0.0
    verdict = case.summary.verdict
    assert "no logged cause acts where it starts" in verdict
    assert "tscope replay --around" in verdict


def _counted_rates(
    flag: np.ndarray, valid: np.ndarray, start: int, end: int
) -> tuple[float, float]:
    """The rates by a direct count over every point (FlagCounts keeps running sums instead)."""
    usable = valid.copy()
    usable[start:end] = False
    rate = float(flag[usable].sum()) / max(int(usable.sum()), 1)
    blocks = flag.size // PERSISTENCE_BLOCK_POINTS
    if blocks < PERSISTENCE_MIN_BLOCKS:
        return rate, rate
    follows_flagged = flag[:-1] & usable[:-1] & usable[1:]
    hits = flag[1:] & follows_flagged
    per_block = [
        (int(hits[block].sum()) + PERSISTENCE_PSEUDO_COUNTS * rate)
        / (int(follows_flagged[block].sum()) + PERSISTENCE_PSEUDO_COUNTS)
        for block in np.array_split(np.arange(follows_flagged.size), blocks)
    ]
    return rate, max(float(np.median(per_block)), rate)


def test_flag_rates_from_running_sums_equal_a_direct_count() -> None:
    rng = np.random.default_rng(7)
    for points in (50, 599, 600, 601, 1_234, 5_000):
        flag = rng.random(points) < rng.uniform(0.05, 0.6)
        valid = rng.random(points) > 0.05
        counts = FlagCounts(flag, valid)
        edges = [0, 1, 2, points // 3, points - 2, points - 1, points]
        edges += rng.integers(0, points + 1, 20).tolist()
        for start in edges:
            for end in (start, start + 1, start + 7, start + 250, points):
                end = min(end, points)
                assert counts.rates(start, end) == _counted_rates(flag, valid, start, end)
