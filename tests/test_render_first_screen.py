"""The first screen of a case on real Trainer runs (fixtures/): the incident card, bands only for
incidents that matter, a zoom on the headline incident, σ that agree with their thresholds,
charts whose labels never collide.

Issue 10 found each of these on these very runs: the healthy `stable` run shaded red from step 88
to the end for an informational grad-norm note, `corrupted_batch`'s spike a sliver inside that
band, "4.38 robust σ" next to "≥ 6 robust σ", "851@(180)3" in `lr_blowup`'s chart.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from case_payloads import incident_case
from layout import CONTENT_PX, inline_svgs, overlapping_labels, svg_label_boxes, table_min_widths

from tscope.analyzers.calibration import calibrated_confidence
from tscope.analyzers.summary import Diagnosis
from tscope.model.replay_section import ReplaySection
from tscope.render import load_case_payload, render_case
from tscope.render.card_view import confidence_word
from tscope.render.chart_marks import Mark, mark_labels
from tscope.render.charts import incident_zoom_chart
from tscope.render.replay_view import replay_view
from tscope.render.series import choose_scale

ROBUST_Z_ALARM_SIGMA = 6.0


@pytest.fixture(scope="module")
def rendered(
    tmp_path_factory: pytest.TempPathFactory, analyzed_trainer_run: Any
) -> dict[str, dict[str, Any]]:
    """Each run analyzed (once per session, shared with test_fixture_runs) and rendered once: its
    payload and every file written, by name."""
    out = tmp_path_factory.mktemp("first-screen")
    results = {}
    for name in ("stable", "corrupted_batch", "lr_jump", "lr_blowup"):
        paths = render_case(analyzed_trainer_run(name), out / name)
        files = {path.name: path.read_text(encoding="utf-8") for path in paths}
        results[name] = {"payload": load_case_payload(out / name), "files": files}
    return results


def test_the_healthy_run_has_no_red_band_and_no_card(rendered: dict[str, Any]) -> None:
    files = rendered["stable"]["files"]
    assert 'class="spike"' not in files["case-chart.svg"]  # the info note on S1 is not shaded
    assert "case-zoom.svg" not in files  # no incident to zoom on
    assert 'id="incident"' not in files["case.html"]
    assert "No incident" in files["case.html"]


def test_only_the_warning_spike_is_shaded_and_the_zoom_frames_it(rendered: dict[str, Any]) -> None:
    payload, files = rendered["lr_jump"]["payload"], rendered["lr_jump"]["files"]
    info_spikes = {f["spike_id"] for f in payload["findings"] if f["severity"] == "info"}
    chart = files["case-chart.svg"]
    assert chart.count('class="spike"') == 2 * 3  # S2 and S3 at step 151, on three panels
    labels = re.findall(r"<tspan[^>]*>([A-Z]\d+)</tspan>", chart)
    assert not info_spikes & set(labels), "an informational spike got a label and a band"
    zoom = files["case-zoom.svg"]
    assert "Zoom: steps 121–181 around step 151" in zoom
    assert (
        zoom.count("<circle") > 60
    )  # one dot per logged step: the spike is readable point by point
    assert "<title>step 151: train/loss 3.6 nats" in zoom  # hover reads the step and its values


def test_a_bad_batch_that_stands_out_gets_the_incident_card(rendered: dict[str, Any]) -> None:
    """corrupted_batch's 1.19× one-step bump is a note by the loss's own impact, but it stands
    out of the run (bad_batch_logs): the chart marks it and the incident card names the cause."""
    files = rendered["corrupted_batch"]["files"]
    assert 'class="spike"' in files["case-chart.svg"]
    card_html = files["case.html"].split('<section id="incident"', 1)[1].split("</section>", 1)[0]
    assert "bad_batch" in card_html
    assert "tscope replay --around 145" in files["case.html"]


def test_the_incident_card_says_what_when_how_bad_why_and_where_to_restart(
    rendered: dict[str, Any],
) -> None:
    card = rendered["lr_jump"]["payload"]["summary"]["card"]
    assert card["step"] == 151 and card["severity"] == "warning"
    assert card["cause"]["category"] == "lr_schedule_jump"
    assert card["restart"]["path"] == "checkpoint-120"
    html = rendered["lr_jump"]["files"]["case.html"]
    card_html = html.split('<section id="incident"', 1)[1].split("</section>", 1)[0]
    assert '<span class="badge severity-warning">warning</span>' in card_html
    assert "<strong>a learning-rate schedule jump</strong>" in card_html
    assert '<code class="small-id">lr_schedule_jump</code>' in card_html  # the id, small
    # the headline's calibrated confidence: the measured precision of lr_schedule_jump headlines,
    # never above the cause finding's own
    payload = rendered["lr_jump"]["payload"]
    cause = next(f for f in payload["findings"] if f["id"] == card["cause"]["finding_id"])
    stated = str(calibrated_confidence("lr_schedule_jump", cause["confidence"]))
    assert float(stated) >= 0.8
    assert f"<strong>high</strong> ({stated})" in card_html
    assert "high ≥ 0.8" in card_html  # the legend for the word
    assert "trainer.train(resume_from_checkpoint=&#34;checkpoint-120&#34;)" in card_html
    markdown = rendered["lr_jump"]["files"]["case.md"]
    assert f"| Confidence | **high** ({stated}) |" in markdown


def test_printed_sigma_is_the_one_compared_with_the_threshold(rendered: dict[str, Any]) -> None:
    for name in ("corrupted_batch", "lr_blowup"):
        for finding in rendered[name]["payload"]["findings"]:
            if finding["category"] not in ("loss_spike", "grad_norm_spike"):
                continue
            sigmas = [float(s) for s in re.findall(r"\(([\d.e+]+) robust σ\)", finding["message"])]
            if finding["evidence"]["nonfinite"]:
                assert sigmas == [], finding["message"]  # NaN/Inf is named, not given a σ
                assert "non-finite" in finding["message"]
            else:
                assert sigmas and sigmas[0] >= ROBUST_Z_ALARM_SIGMA, finding["message"]


def test_lr_blowup_chart_labels_do_not_collide_and_the_lr_is_on_a_log_axis(
    rendered: dict[str, Any],
) -> None:
    html = rendered["lr_blowup"]["files"]["case.html"]
    for svg in inline_svgs(html):
        _, boxes = svg_label_boxes(svg)
        assert overlapping_labels(boxes) == []
    chart = rendered["lr_blowup"]["files"]["case-chart.svg"]
    assert "Learning rate: log scale" in html
    # every finding dated inside the chart is labelled, by its own id or inside a "+N" merge
    # (test_seven_ids_within_a_few_steps_become_one_label... checks the merge itself)
    shown = re.findall(r">([FS]\d+)</tspan>", chart)
    merged = sum(int(n) for n in re.findall(r">\+(\d+)</tspan>", chart))
    findings = rendered["lr_blowup"]["payload"]["findings"]
    assert len(set(shown)) + merged >= len([f for f in findings if f["step"] is not None])
    assert "Loss · nats" in chart and "Gradient norm · L2, before clipping" in chart
    assert all(width <= CONTENT_PX for width, _ in table_min_widths(html))


def test_what_was_seen_comes_before_the_evidence_in_markdown(rendered: dict[str, Any]) -> None:
    markdown = rendered["lr_blowup"]["files"]["case.md"]
    header = markdown.split("## Findings", 1)[1].split("\n| ---", 1)[0].strip().splitlines()[-1]
    assert header == "| ID | Severity | Step | What was seen | Suggestion |"
    assert "### Evidence and thresholds" in markdown


def test_seven_ids_within_a_few_steps_become_one_label_with_every_id_in_its_tooltip() -> None:
    marks = [Mark(400.0 + 2 * i, f"F{i + 1}", "#6a1b9a", f"F{i + 1} warning") for i in range(7)]
    (label,) = mark_labels(marks, baseline=15)
    assert re.findall(r">([^<>]+)</tspan>", label) == ["F1", "F2", "F3", "+4"]
    assert "F7 warning" in label.split("<title>", 1)[1]


def test_a_learning_rate_spanning_more_than_10x_gets_a_log_axis() -> None:
    warmup = [3e-3 * step / 20 for step in range(1, 21)]  # ×20 over the warm-up
    assert choose_scale(warmup).kind == "linear"
    assert choose_scale(warmup, log_above_span=10.0).kind == "log"
    assert choose_scale([1e-3, 2e-3, 5e-3], log_above_span=10.0).kind == "linear"


def test_confidence_words_follow_the_legend() -> None:
    assert [confidence_word(c) for c in (0.95, 0.8, 0.57, 0.5, 0.2, None)] == [
        "high",
        "high",
        "medium",
        "medium",
        "low",
        "unknown",
    ]


def test_a_headline_that_is_its_own_explanation_is_not_repeated() -> None:
    message = "The fp16 loss scale fell from 65536 to 1 at step 300 and stayed there persistently"
    diagnosis = Diagnosis(message, None, "loss_scale_collapse", 0.8, "", "")
    assert diagnosis.sentence() == message + "."
    assert diagnosis.sentence().count("persistently") == 1


def test_a_replay_within_the_logs_rounding_says_so_in_the_same_sentence() -> None:
    fidelity = {
        "compared_steps": 57,
        "bit_exact_steps": 57,
        "max_rel_loss_diff": 1.8837150128536745e-05,
        "tolerance": 1e-5,
        "logged_decimals": 4,
        "reproduced": True,
    }
    section = {"steps": [100, 156], "per_step": [{}] * 57, "fidelity": fidelity}
    view = replay_view(ReplaySection.from_dict(section))
    assert view is not None
    assert (
        "max relative loss difference 1.88e-5, above the 1e-5 tolerance only by the log's own "
        "rounding: it keeps 4 decimals" in view["verdict"]
    )
    fidelity["max_rel_loss_diff"] = 2e-7
    again = replay_view(ReplaySection.from_dict(section))
    assert again is not None and "(tolerance 1e-5)" in again["verdict"]


def test_the_zoom_keeps_points_on_a_bucketed_long_run() -> None:
    """One chart point per 4 steps: ±30 steps would be 15 points, so the zoom widens to ±60."""
    chart = incident_zoom_chart(incident_case())
    assert chart is not None
    assert "Zoom: steps 540–660 around step 600" in chart.svg


def test_a_loss_the_trainer_logged_as_zero_after_it_went_nan_is_drawn_as_nan(
    rendered: dict[str, Any],
) -> None:
    """lr_blowup: from step 183 the Trainer logs loss 0.0 (logging_nan_inf_filter) while the
    gradient norm is NaN; the chart must not show a loss that fell to zero."""
    chart = rendered["lr_blowup"]["payload"]["chart_series"]["train/loss"]
    after = [v for s, v in zip(chart["steps"], chart["values"], strict=True) if s >= 184]
    assert after, "the run logs steps after the blow-up"
    assert all(v is None or not math.isfinite(float(v)) for v in after), after
