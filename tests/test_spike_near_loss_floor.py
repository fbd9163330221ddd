"""Near a loss floor a ratio says nothing: a short bump whose excess is under 5% of what the run
had gained from its first loss is routine (a healthy-run hunt of session 25: a contrastive run at
0.029 went to 0.073 for a step, 2.5×, and was warned of as "most likely a bad batch (0.94)")."""

from __future__ import annotations

from tscope.analyzers.impact import Impact, impact_severity


def _bump(initial: float, baseline: float, peak: float) -> Impact:
    return Impact(
        baseline=baseline,
        peak=peak,
        excess_nats=peak - baseline,
        ratio=peak / baseline,
        duration_steps=2,
        points=2,
        area=peak - baseline,
        recovered=True,
        nonfinite=False,
        returned_to_initial=False,
        effective_points=1.0,
        initial=initial,
    )


def test_a_doubling_at_a_loss_floor_is_routine():
    assert impact_severity(_bump(initial=3.47, baseline=0.029, peak=0.073)) == "info"


def test_a_language_models_one_point_bump_keeps_its_warning():
    # A level of 2.5 after a first loss of 10: a 1.5× bump is 17% of the gain.
    assert impact_severity(_bump(initial=10.0, baseline=2.5, peak=3.8)) == "warning"


def test_a_fine_tunes_bump_near_its_start_keeps_its_warning():
    # Little gained yet: the ratio decides, as before.
    assert impact_severity(_bump(initial=2.0, baseline=1.8, peak=2.9)) == "warning"
