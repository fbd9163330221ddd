"""Only the HF Trainer hides a NaN loss behind its logging filter: a plain loop's log that holds
a finite loss where the gradient norm already went non-finite for good is not "the Trainer's
logging_nan_inf_filter" (a planted-cause hunt of session 25: a JSON Lines log)."""

from __future__ import annotations

import json

import numpy as np

from tscope.pipeline import analyze_run


def test_a_plain_loops_blow_up_is_not_blamed_on_the_trainers_filter(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for step in range(1, 301):
        loss = 5.0 * np.exp(-step / 80) + 2.0 + 0.03 * rng.standard_normal()
        grad = 1.0 + 0.05 * rng.standard_normal()
        if step >= 290:
            loss, grad = 3.5e11 if step < 295 else float("nan"), float("inf")
        rows.append({"step": step, "loss": loss, "grad_norm": grad, "lr": 1e-3})
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8"
    )
    case, _ = analyze_run(str(tmp_path))
    nan = [f for f in case.findings if f.category == "nan_loss"]
    assert nan and nan[0].step == 290
    assert "Trainer" not in nan[0].message
    assert "gradient norm of that step and every later one is non-finite" in nan[0].message
