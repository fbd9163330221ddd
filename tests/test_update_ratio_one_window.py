"""update_ratio_high against a single past window needs 4×, against two or more 3×
(explainers/updates.py UPDATE_RATIO_FACTOR_ONE_WINDOW: on the benchmark's controls a window
reached 3.01× its one past window, holdout16 trainer_gpt2-control-102, but at most 0.91× the
median of two or more). The windows table is what update_windows builds from checkpoints."""

from __future__ import annotations

import pandas as pd

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.updates import _update_ratio_high
from tscope.analyzers.update_windows import CheckpointLr
from tscope.ingest.assemble import assemble_run

TENSORS = ("h.0.attn.weight", "h.0.mlp.weight", "h.1.attn.weight", "h.1.mlp.weight")
LR = 3.4e-3


def _windows(ends: list[int], last_factor: float) -> pd.DataFrame:
    rows = []
    for index, end in enumerate(ends[1:], start=1):
        ratio = 0.002 * (last_factor if index == len(ends) - 1 else 1.0)
        for tensor in TENSORS:
            rows.append(
                {
                    "tensor": tensor,
                    "step": end,
                    "window_start": ends[index - 1],
                    "update_ratio_per_step": ratio,
                    "per_lr_ratio": ratio / LR,
                    "window_lr": LR,
                    "delta_source": "weights_fp32",
                }
            )
    return pd.DataFrame(rows)


def _flagged(ends: list[int], factor: float) -> list[int]:
    evidence = Evidence(assemble_run("run", "run", [], []), [], [], None)
    lr = CheckpointLr({end: LR for end in ends}, frozenset())
    findings = _update_ratio_high(_windows(ends, factor), lr, evidence)
    return [int(f.step) for f in findings if f.step is not None]


def test_three_times_one_past_window_is_not_raised() -> None:
    assert _flagged([90, 135, 180], 3.01) == []  # windows 135 and 180: one past window
    assert _flagged([90, 135, 180], 4.2) == [180]


def test_three_times_the_median_of_two_past_windows_is_raised() -> None:
    assert _flagged([45, 90, 135, 180], 3.01) == [180]
    assert _flagged([45, 90, 135, 180], 2.5) == []
