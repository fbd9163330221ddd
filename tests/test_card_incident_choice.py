"""Which incident a finding's card describes (analyzers/causes.py `incident_of`, and standalone
conditions in analyzers/summary.py). Planted-cause hunt, session 26: an optimizer reset at a
resume (step 150) took the card of a one-point gradient blip at 187, and an Adam-ε warning at a
checkpoint took that of a blip at the same step, both "cause undetermined"."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from test_cause_timing import finding

from tscope.analyzers.categories import STANDALONE
from tscope.analyzers.causes import incident_of
from tscope.model import Finding


def _finding(category: str, step: int) -> Finding:
    return replace(finding(category, step), source="checkpoints")


def _incident(onset: int, severity: str):
    return SimpleNamespace(
        kind="spike",
        spike=None,
        onset_step=onset,
        peak_step=onset,
        end_step=onset + 1,
        severity=severity,
    )


def test_a_cause_joins_only_an_incident_that_matters_itself():
    blip = _incident(187, "info")
    assert incident_of(_finding("optimizer_state_reset", 150), [blip]) is None  # type: ignore[list-item]
    spike = _incident(187, "warning")
    assert incident_of(_finding("optimizer_state_reset", 150), [spike]) is spike  # type: ignore[list-item]


def test_other_findings_join_any_incident_in_reach():
    # An update-ratio warning beside a gradient blip: the blip's cause competition explains it.
    blip = _incident(190, "info")
    assert incident_of(_finding("update_ratio_high", 190), [blip]) is blip  # type: ignore[list-item]


def test_adam_epsilon_dominance_is_a_standing_condition_with_its_own_card():
    assert "adam_epsilon_dominance" in STANDALONE


def test_repeated_data_acts_until_its_last_repeated_step():
    # Stuck from 900 to 1099: the loss jumps at 1100 when fresh batches return to a model that
    # memorised the repeated one (a fresh verification run: "undetermined" before).
    from tscope.analyzers.causes import _timed

    spike = SimpleNamespace(
        spike=None, onset_step=1100, peak_step=1100, end_step=1160, severity="warning"
    )
    repeated = replace(finding("repeated_data", 910), evidence={"last_step": 1090})
    assert _timed(SimpleNamespace(checkpoints=None), repeated, spike)  # type: ignore[arg-type]
    no_end = finding("repeated_data", 910)
    assert not _timed(SimpleNamespace(checkpoints=None), no_end, spike)  # type: ignore[arg-type]


def test_a_cause_at_the_incident_s_own_steps_joins_it_whatever_its_size():
    # A replay's bad batch at the 1.19× bump it explains: the verdict reads "a bad batch".
    bump = _incident(145, "info")
    assert incident_of(_finding("bad_batch", 145), [bump]) is bump  # type: ignore[list-item]
