"""A skipped-iterations count in a Megatron-style log: Megatron prints its logging window's
count; a log that prints a running total repeats it while the loss scale holds
(tscope/ingest/readers/megatron_log.py, `_skip_events`). Read per window, a blind set's running
total (session 27) made a skip of every record after one overflow at 194, and the collapse that
began at 230 was dated 194; the collapse is now dated where its dense run of skips began."""

from __future__ import annotations

from pathlib import Path

import tscope
from tscope.ingest.readers.megatron_log import MegatronLogReader

LINE = (
    " iteration {step:8d}/     400 | consumed samples: {samples:10d} | learning rate: 1.000E-03 |"
    " global batch size:    16 | lm loss: {loss:.6E} | loss scale: {scale:g} |"
    " grad norm: {norm} | number of skipped iterations: {skipped:3d} |"
)


def _log(folder: Path, running_total: bool) -> Path:
    lines, scale, total = [], 131072.0, 0
    for step in range(1, 401):
        skipped_now = step == 194 or step >= 230
        if skipped_now:
            scale /= 2
            total += 1
        lines.append(
            LINE.format(
                step=step,
                samples=16 * step,
                loss=3.0 - step / 1000 if step < 230 else 2.8,
                scale=scale,
                norm="nan" if skipped_now else "1.000",
                skipped=total if running_total else int(skipped_now),
            )
        )
    path = folder / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def _skips(path: Path) -> list[int]:
    read = MegatronLogReader().read(path, path.name)
    return [e.step for e in read.events if e.kind == "skipped_step"]


def test_a_running_total_is_read_as_its_increases(tmp_path: Path) -> None:
    assert _skips(_log(tmp_path, running_total=True)) == [194, *range(230, 401)]


def test_megatron_window_counts_stay_one_event_per_record(tmp_path: Path) -> None:
    assert _skips(_log(tmp_path, running_total=False)) == [194, *range(230, 401)]


def test_the_collapse_is_dated_where_its_dense_skips_began(tmp_path: Path) -> None:
    _log(tmp_path, running_total=True)
    case = tscope.analyze(tmp_path)
    collapse = next(f for f in case.findings if f.category == "loss_scale_collapse")
    assert collapse.step == 230


def test_updates_the_scaler_skipped_do_not_hide_the_logged_loss(tmp_path: Path) -> None:
    """Non-finite gradient norms to the end of the log hide the loss only where nothing skipped
    those updates: here the scale halves and the skip count rises at every one of them, so the
    weights stayed finite and the logged loss is real. Read as NaN, the collapse (the cause) was
    an info note under a divergence "from step 230" with no cause (a blind set, session 28)."""
    _log(tmp_path, running_total=True)
    case = tscope.analyze(tmp_path)
    categories = [f.category for f in case.findings]
    assert categories[0] == "loss_scale_collapse"
    assert case.findings[0].severity == "critical"
    assert "nan_loss" not in categories
    assert "loss_divergence" not in categories


def _start_calibration_log(folder: Path, collapse_from: int | None = None) -> Path:
    """Megatron's own start: --initial-loss-scale 2^32, log_interval 10. The first ten
    iterations all overflow (the first line has no loss), six more by iteration 20, where the
    scale settles at 2^17; with `collapse_from`, it halves on every iteration from there."""
    lines, scale = [], 2.0**17
    for step in range(10, 401, 10):
        skipped = 10 if step == 10 else 6 if step == 20 else 0
        if collapse_from is not None and step > collapse_from:
            skipped, scale = 10, scale / 2**10
        lines.append(
            LINE.format(
                step=step,
                samples=16 * step,
                loss=2.5 + 3.0 * 0.99**step,
                scale=2.0**24 if step == 10 else scale,
                norm="1.000",
                skipped=skipped,
            )
        )
    path = folder / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_scalers_start_up_logged_every_ten_iterations_is_no_collapse(tmp_path: Path) -> None:
    """Logged every 10 iterations, the descent from 2^32 is one drop of 2^7 between the first
    two logged scales; a blind set's healthy Megatron-style run (session 29) was warned "16 of
    the 140 steps were skipped" for it."""
    case = tscope.analyze(_start_calibration_log(tmp_path))
    scale = [f for f in case.findings if f.category == "loss_scale_collapse"]
    assert [(f.severity, f.step) for f in scale] == [("info", 20)]
    assert "halved 7 times from the start" in scale[0].message


def test_a_collapse_after_the_start_up_is_still_one(tmp_path: Path) -> None:
    case = tscope.analyze(_start_calibration_log(tmp_path, collapse_from=200))
    scale = [f for f in case.findings if f.category == "loss_scale_collapse"]
    assert scale and scale[0].severity in ("warning", "critical") and scale[0].step > 200
