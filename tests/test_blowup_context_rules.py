"""What a blow-up is not blamed on (bench/synthetic_logs.py and a real Megatron log).

- lr_too_high: an LR held at its peak for most of the run before the blow-up, however short or
  sparse the log, is not implicated (nothing in the LR changed at the onset).
- warmup_too_short: a log that begins long after step 0 cannot show that the run had no warm-up.
- loss_scale_collapse: halvings that begin once the loss has broken follow the blow-up (info),
  those that come first still explain it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.synthetic import loss_curve
from tscope.ingest.assemble import assemble_run
from tscope.model import LogRead, Run
from tscope.model.metric_names import LEARNING_RATE, LOSS, LOSS_SCALE
from tscope.pipeline import analyze_run, build_case

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
if not REALDATA.is_dir():
    REALDATA = Path("/work/shared/realdata")


def _run(series: dict[str, np.ndarray], steps: np.ndarray) -> Run:
    rows = [
        (int(step), metric, float(value), metric)
        for metric, values in series.items()
        for step, value in zip(steps, values, strict=True)
    ]
    read = LogRead(kind="synthetic", path="log.jsonl", metrics=LogRead.rows_to_table(rows, "x"))
    return assemble_run("synthetic", "/synthetic", [read], [])


def _alerts(run: Run) -> dict[str, int | None]:
    case = build_case(run, [])
    return {f.category: f.step for f in case.findings if f.severity in ("warning", "critical")}


def _blown_up(points: int, at: int, seed: int) -> np.ndarray:
    loss = loss_curve(points, seed=seed, noise=0.01)
    loss[at:] = np.nan
    return loss


def test_a_peak_held_for_most_of_a_short_log_is_not_blamed() -> None:
    # 30 points logged every 10 steps: the LR reached its peak at step 20 and held it for 16 of
    # the 18 logged points before the loss went non-finite at step 190.
    steps = np.arange(10, 310, 10)
    lr = np.minimum(steps / 20, 1.0) * 1e-3
    run = _run({LOSS: _blown_up(30, 18, seed=1), LEARNING_RATE: lr}, steps)
    alerts = _alerts(run)
    assert "nan_loss" in alerts and "lr_too_high" not in alerts
    # Blown up 4 points after the peak: the LR is still implicated.
    lr = np.minimum(steps / 150, 1.0) * 1e-3
    run = _run({LOSS: _blown_up(30, 18, seed=1), LEARNING_RATE: lr}, steps)
    assert _alerts(run).get("lr_too_high") == 190


def test_a_log_that_begins_late_cannot_show_a_missing_warm_up() -> None:
    loss = loss_curve(60, seed=2, noise=0.01)
    loss[20:] = np.nan  # blown up 20 steps into the log, at a constant LR
    lr = np.full(60, 1e-3)
    from_start = _alerts(_run({LOSS: loss, LEARNING_RATE: lr}, np.arange(1, 61)))
    assert from_start.get("warmup_too_short") == 21
    late = _alerts(_run({LOSS: loss, LEARNING_RATE: lr}, np.arange(78_085, 78_145)))
    assert "nan_loss" in late and "warmup_too_short" not in late


def _scaled_run(collapse_from: int, break_at: int) -> Run:
    steps = np.arange(1, 401)
    loss = loss_curve(400, seed=5, noise=0.01)
    loss[break_at - 1 :] *= 2.5  # broken for good from `break_at`
    scale = np.full(400, 65536.0)
    scale[collapse_from - 1 :] = 65536.0 / 2.0 ** np.minimum(np.arange(400 - collapse_from + 1), 8)
    return _run({LOSS: loss, LOSS_SCALE: scale}, steps)


def test_a_loss_scale_collapse_after_the_loss_broke_is_its_consequence() -> None:
    after = build_case(_scaled_run(collapse_from=301, break_at=300), [])
    (collapse,) = [f for f in after.findings if f.category == "loss_scale_collapse"]
    assert collapse.severity == "info" and collapse.evidence["loss_broke_at_step"] == 300
    assert after.summary.card is not None
    assert after.summary.card.cause.category != "loss_scale_collapse"
    before = build_case(_scaled_run(collapse_from=290, break_at=300), [])
    (collapse,) = [f for f in before.findings if f.category == "loss_scale_collapse"]
    assert collapse.severity == "warning" and collapse.evidence["loss_broke_at_step"] is None


def test_bloom_104b_chronicles_blow_up_is_not_blamed_on_its_loss_scale() -> None:
    path = REALDATA / "megatron_logs" / "tr8b-104B__chronicles.log"
    if not path.is_file():
        pytest.skip("shared/realdata is not beside this checkout")
    case = analyze_run(path, read_weights=False).case
    categories = {f.category: f for f in case.findings}
    assert categories["loss_scale_collapse"].severity == "info"
    assert "lr_too_high" not in categories  # the LR sat at 6e-5 from step 6,503 to 17,062
    assert case.summary.card is None or case.summary.card.cause.category != "loss_scale_collapse"


def test_a_short_noisy_log_that_falls_steadily_is_no_plateau() -> None:
    # 100 points falling 10.8 -> 8.8 under 8% noise: inside the window medians' noise band (~3
    # nats), but the least-squares slope is ~7 standard errors below zero.
    steps = np.arange(1, 101)
    trend = 10.8 - 2.0 * (steps - 1) / 99
    for seed in range(5):
        rng = np.random.default_rng(seed)
        falling = trend * (1 + 0.08 * rng.standard_normal(100))
        assert "loss_plateau" not in _alerts(_run({LOSS: falling}, steps)), seed
        # The same noise around a level that does not move is a plateau.
        flat = 10.8 * (1 + 0.08 * rng.standard_normal(100))
        assert "loss_plateau" in _alerts(_run({LOSS: flat}, steps)), seed
