"""An fp16 loop that prints GradScaler's scale as a bare `scale` and its running count of skipped
steps (a fresh verification run, session 26: `step N | loss X | scale S | skipped_steps K`, whose
scale collapsed to 3e-42, read as healthy). The scale is the loss scale in a step line; a running
count of skips is read as its last value, never summed over the records."""

from __future__ import annotations

from pathlib import Path

from step_line_logs import write_log

from tscope.pipeline import analyze_run


def _log(collapse_at: int | None) -> str:
    lines, scale, skipped = [], 65536.0, 2
    for step in range(10, 2010, 10):
        if collapse_at is not None and step >= collapse_at:
            scale /= 2**10
            skipped += 10
        loss = 1.5 + 3.0 * 0.999**step
        lines.append(
            f"step {step:5d} | loss {loss:.4f} | scale {scale:.3e} | skipped_steps {skipped}"
        )
    return "\n".join(lines) + "\n"


def test_a_printed_scale_that_collapses_is_a_loss_scale_collapse(tmp_path: Path) -> None:
    case, run = analyze_run(write_log(tmp_path, _log(collapse_at=1240)))
    assert run.has("train/loss_scale")
    assert case.findings[0].category == "loss_scale_collapse"
    assert case.findings[0].step == 1240


def test_a_steady_running_count_of_skips_is_not_frequent_skipping(tmp_path: Path) -> None:
    # Two skips in the scaler's first steps, printed again on every one of 200 records.
    case, _ = analyze_run(write_log(tmp_path, _log(collapse_at=None)))
    assert case.summary.status == "healthy"
