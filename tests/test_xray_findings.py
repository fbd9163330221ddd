"""The token audit's pure half: closed-form rules, findings and the rendered section (no torch)."""

from __future__ import annotations

from tscope.analyzers.xray import fit_rules, matching_rules, xray_findings
from tscope.model.xray import TokenWeight, XrayResult
from tscope.render import render_case
from tscope.xray_pipeline import XrayAudit, case_with_xray


def tokens_for(micro_batch_targets, weight_of):
    """Targets of sequence i in micro-batch i, weight given by `weight_of(n_targets, n_micro)`."""
    tokens = []
    for index, count in enumerate(micro_batch_targets):
        for position in range(1, count + 1):
            tokens.append(
                TokenWeight(index, position, weight_of(count, len(micro_batch_targets)), 1.0, index)
            )
    return tokens


def result_with(tokens, leak=((1.0, 0.0), (0.0, 1.0)), source="entry.py"):
    fits = fit_rules(tokens)
    return XrayResult(
        mode="entry",
        source=source,
        lengths=(4, 12),
        intended="token_mean",
        tokens=tuple(tokens),
        forward_calls=2,
        world_size=1,
        boundary_weight=0.0,
        leak_matrix=leak,
        leak_threshold=1e-6,
        fits=fits,
        matched_rules=tuple(matching_rules(fits)),
    )


def test_each_closed_form_is_recognised_and_the_others_are_not():
    total = 3 + 11
    micro_mean = tokens_for((3, 11), lambda n, m: total / (m * n))
    assert matching_rules(fit_rules(micro_mean)) == ["micro_batch_mean", "sequence_mean"]
    token_mean = tokens_for((3, 11), lambda n, m: 1.0)
    assert matching_rules(fit_rules(token_mean)) == ["token_mean"]


def test_a_clean_result_has_no_finding_and_a_leak_above_threshold_has_one():
    clean = result_with(tokens_for((3, 11), lambda n, m: 1.0))
    assert xray_findings(clean) == []
    leaking = result_with(tokens_for((3, 11), lambda n, m: 1.0), leak=((1.0, 0.0), (2e-6, 1.0)))
    (finding,) = xray_findings(leaking)
    assert finding.category == "cross_sequence_leak" and finding.evidence["from_sequence"] == 1


def test_the_section_renders_hostile_names_as_text(tmp_path):
    result = result_with(
        tokens_for((3, 11), lambda n, m: 14 / (2 * n)), source="<script>x</script>.py"
    )
    case = case_with_xray(XrayAudit(result, xray_findings(result), None))
    render_case(case, tmp_path, ("html", "md"))
    html = (tmp_path / "case.html").read_text()
    assert "<script>x" not in html and "&lt;script&gt;x" in html
    assert html.count("<svg") >= 2 and 'id="xray"' in html
