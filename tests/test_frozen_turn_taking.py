"""A tensor trained on a share of the steps all along (multi-task heads taking turns) is not a
frozen one (analyzers/explainers/frozen_tensors.py, `_still_stopped`). Healthy-run hunt, session
26: a Lightning run alternating two task heads had both "stopped training after step 298", since
each head's Adam counter is half the global step. A tensor that stopped, earlier or within the
last checkpoint window, is still found."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tscope.analyzers.explainers.frozen_tensors import frozen_finding

CHECKPOINTS = (200, 400, 600)
BODY = [f"body.{i}.weight" for i in range(6)]


def _layers(head_counters: tuple[float, float, float]) -> pd.DataFrame:
    rows = []
    for index, step in enumerate(CHECKPOINTS):
        delta = np.nan if index == 0 else 1.0
        for tensor in BODY:
            rows.append({"step": step, "tensor": tensor, "adam_step": step, "delta_norm": delta})
        moved = delta if index == 0 or head_counters[index] > head_counters[index - 1] else 0.0
        rows.append(
            {
                "step": step,
                "tensor": "head.weight",
                "adam_step": head_counters[index],
                "delta_norm": moved,
            }
        )
    return pd.DataFrame(rows)


def test_a_head_updated_on_every_other_step_is_not_frozen():
    assert frozen_finding(_layers((100, 200, 300))) is None


def test_a_head_that_stopped_two_windows_ago_is_found():
    found = frozen_finding(_layers((199, 250, 250)))
    assert found is not None and found.category == "frozen_parameters"
    assert found.layer == "head.weight" or "head.weight" in found.message


def test_a_head_that_stopped_within_the_last_window_is_found():
    found = frozen_finding(_layers((200, 400, 450)))
    assert found is not None and "head.weight" in found.message


def _backbone_frozen_at(stop: int) -> pd.DataFrame:
    """Six body tensors frozen at `stop` while only the head trains on: most counters stop."""
    rows = []
    for index, step in enumerate(CHECKPOINTS):
        for tensor in BODY:
            delta = np.nan if index == 0 else (1.0 if step <= stop else 0.0)
            counter = min(step, stop)
            rows.append({"step": step, "tensor": tensor, "adam_step": counter, "delta_norm": delta})
        head_delta = np.nan if index == 0 else 1.0
        rows.append(
            {"step": step, "tensor": "head.weight", "adam_step": step, "delta_norm": head_delta}
        )
    return pd.DataFrame(rows)


def test_a_backbone_stopped_while_only_the_head_trains_is_found():
    """Most counters stop (blind set, session 27: a Lightning run whose backbone froze at 300 of
    800 while lm_head trained on was healthy: the rule asked for a counting majority)."""
    found = frozen_finding(_backbone_frozen_at(300))
    assert found is not None and found.severity == "warning"
    assert found.evidence["frozen_since_step"] == 301
    assert sorted(found.evidence["frozen_tensors"]) == BODY


def test_a_body_and_head_that_all_count_on_are_not_frozen():
    assert frozen_finding(_backbone_frozen_at(10_000)) is None
