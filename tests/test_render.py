"""case.html / case.md / case.json: golden files, re-rendering, escaping, charts that stay readable.

Golden files live in tests/golden/<case>/; after reviewing a deliberate change, refresh them with
`pytest tests/test_render.py --update-golden`.
"""

from __future__ import annotations

import difflib
import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from case_payloads import healthy_case, incident_case, partial_payload

from tscope.errors import UnreadableInput, UsageError
from tscope.model.case import Case
from tscope.render import CHART_FILES, load_case_payload, render_case
from tscope.render.formatting import format_number, format_step
from tscope.render.markdown import md_cell, md_text
from tscope.render.series import choose_scale

GOLDEN = Path(__file__).parent / "golden"
CASES: dict[str, Callable[[], Case | dict[str, Any]]] = {
    "incident": incident_case,
    "healthy": healthy_case,
    "partial": partial_payload,
}
ESCAPED_SCRIPT = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


def rendered(name: str, out_dir: Path) -> dict[str, str]:
    """Render one of the representative cases; file name -> text."""
    paths = render_case(CASES[name](), out_dir)
    return {path.name: path.read_text(encoding="utf-8") for path in paths}


TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
STYLE_BLOCK = re.compile(r"<style>\n(.*?)</style>", re.DOTALL)
# The golden pages hold this line where the page inlines the stylesheets, so that a change to
# templates/*.css does not rewrite every golden page; the inlined text is checked against the
# stylesheet files instead (inlined_stylesheets).
STYLESHEET_PLACEHOLDER = "<style>\n/* templates/case.css and the page's additions */\n</style>"


def inlined_stylesheets(page: str) -> list[str]:
    """The templates/*.css files the page's <style> holds, in order; fails on any other text."""
    match = STYLE_BLOCK.search(page)
    assert match, "the page inlines no stylesheet"
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    found: list[str] = []
    while lines:
        for sheet in sorted(TEMPLATES.glob("*.css")):
            sheet_lines = [line for line in sheet.read_text().splitlines() if line.strip()]
            if lines[: len(sheet_lines)] == sheet_lines:
                found.append(sheet.name)
                lines = lines[len(sheet_lines) :]
                break
        else:
            pytest.fail(f"the page's <style> holds text no stylesheet has: {lines[0]!r}")
    return found


def assert_matches_golden(case_name: str, file_name: str, text: str, update: bool) -> None:
    golden = GOLDEN / case_name / file_name
    if file_name.endswith(".html"):
        assert inlined_stylesheets(text)[0] == "case.css"
        text = STYLE_BLOCK.sub(lambda _: STYLESHEET_PLACEHOLDER, text, count=1)
    if update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8", newline="\n")
        return
    assert golden.exists(), f"{golden} is missing: run pytest --update-golden, then review it"
    expected = golden.read_text(encoding="utf-8")
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), text.splitlines(), str(golden), "rendered", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:40])
        pytest.fail(f"{golden} differs (review, then --update-golden):\n{shown}")


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_renderings_match_golden_files(case_name: str, tmp_path: Path, update_golden: bool) -> None:
    files = rendered(case_name, tmp_path)
    for file_name in ("case.html", "case.md", "case.json"):
        assert_matches_golden(case_name, file_name, files[file_name], update_golden)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_report_rerenders_identical_files_from_case_json(case_name: str, tmp_path: Path) -> None:
    first = rendered(case_name, tmp_path / "analyze")
    payload = load_case_payload(tmp_path / "analyze")
    again = render_case(payload, tmp_path / "report")
    assert {path.name: path.read_text(encoding="utf-8") for path in again} == first
    from_file = load_case_payload(tmp_path / "analyze" / "case.json")
    assert from_file == payload


def test_key_order_of_the_payload_does_not_change_a_byte(tmp_path: Path) -> None:
    payload = incident_case().to_dict()
    reversed_payload = _reverse_key_order(payload)
    assert list(reversed_payload) != list(payload)
    first = render_case(payload, tmp_path / "a")
    second = render_case(reversed_payload, tmp_path / "b")
    for one, other in zip(first, second, strict=True):
        assert one.read_bytes() == other.read_bytes(), one.name


def test_case_json_is_sorted_strict_json_with_trailing_newline(tmp_path: Path) -> None:
    text = rendered("partial", tmp_path)["case.json"]
    assert text.endswith("}\n")
    payload = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in case.json"))
    assert text == json.dumps(payload, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert payload["chart_series"]["train/loss"]["values"][-3:] == ["nan", "inf", "nan"]
    assert payload["layers"]["norm_growth"][7][0] is None


def test_html_escapes_every_log_derived_string(tmp_path: Path) -> None:
    html = rendered("partial", tmp_path)["case.html"]
    assert "<script" not in html.lower()
    assert f"<code>train/{ESCAPED_SCRIPT}</code>" in html  # metric name (other metrics table)
    assert f"<tr><td><code>note</code></td><td>{ESCAPED_SCRIPT}</td></tr>" in html  # config
    assert f"<code>runs/{ESCAPED_SCRIPT}</code>" in html  # run path
    assert f"<code>logs/{ESCAPED_SCRIPT}.jsonl</code>" in html  # partial input
    assert f"run{ESCAPED_SCRIPT}</span>" in html  # run name


def test_html_is_self_contained_with_no_script_or_network(tmp_path: Path) -> None:
    html = rendered("incident", tmp_path)["case.html"]
    for forbidden in ("<script", "src=", "<link", "@import", "url(", "<iframe", "<img"):
        assert forbidden not in html.lower(), forbidden
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) == {"http://www.w3.org/2000/svg"}
    assert html.count("<svg ") == 3  # the incident chart, its zoom, the other metrics, inline


def test_svg_files_are_valid_xml_and_the_same_drawing_as_the_html(tmp_path: Path) -> None:
    files = rendered("partial", tmp_path)
    for file_name in CHART_FILES.values():
        svg = files[file_name]
        root = ElementTree.fromstring(svg)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert not [element for element in root.iter() if element.tag.endswith("script")]
        assert svg.strip() in files["case.html"]
    assert "train/<script>" in "".join(ElementTree.fromstring(files["case-metrics.svg"]).itertext())


def test_markdown_links_each_chart_file_and_holds_no_raw_html(tmp_path: Path) -> None:
    files = rendered("partial", tmp_path)
    markdown = files["case.md"]
    for file_name in CHART_FILES.values():
        assert re.search(rf"!\[[^\]]+\]\({re.escape(file_name)}\)", markdown), file_name
    prose = re.sub(r"(`+).+?\1", "", markdown)  # code spans print literally; check the rest
    assert not re.search(r"(?<!\\)<[A-Za-z/!]", prose), "raw HTML tag in case.md"
    assert not re.search(r"(?<!\\)&[A-Za-z#]", prose), "raw HTML entity in case.md"
    assert r"\<script\>alert('x')\</script\>" in prose  # the config value, escaped, not dropped


def test_markdown_table_rows_survive_pipes_and_newlines_in_messages(tmp_path: Path) -> None:
    markdown = rendered("partial", tmp_path)["case.md"]
    findings = markdown.split("## Findings", 1)[1].split("\n## ", 1)[0]
    summary, evidence = findings.split("### Evidence and thresholds", 1)
    rows = [line for line in summary.splitlines() if line.startswith("|")]
    assert len(rows) == 3  # header, separator, the one finding: the newline did not split it
    cells_per_row = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
    assert cells_per_row == {6}  # 5 columns everywhere: the message's pipe is escaped
    assert "second line" in rows[2]
    evidence_rows = [line for line in evidence.splitlines() if line.startswith("|")]
    assert len(evidence_rows) == 3
    assert {len(re.findall(r"(?<!\\)\|", row)) for row in evidence_rows} == {7}


def test_markdown_escapes_characters_markdown_would_act_on() -> None:
    assert md_text("- **x** <b>|_y_ #1") == r"\- \*\*x\*\* \<b\>\|\_y\_ \#1"
    assert md_text("1. not a list") == r"1\. not a list"
    assert md_text("run `tscope replay a|b` now") == "run `tscope replay a|b` now"
    assert md_cell("run `tscope replay a|b` now") == r"run `tscope replay a\|b` now"
    assert md_cell("2.84") == "2.84"
    assert md_cell("") == "—"


def test_incident_chart_shades_the_spike_and_marks_every_finding(tmp_path: Path) -> None:
    svg = rendered("incident", tmp_path)["case-chart.svg"]
    assert svg.count('class="spike"') == 3  # one spike, shaded on each of the three panels
    labels = re.findall(r"<tspan[^>]*>(\w+) ?</tspan>", svg)
    assert sorted(labels) == ["F1", "F2", "F3", "S1"]
    assert svg.count('class="nonfinite"') == 1  # the NaN grad norms at steps 640-642
    html = rendered("incident", tmp_path / "again")["case.html"]
    assert "Loss: log scale; the values span ×" in html
    assert "(the largest is 1020× the median)" in html


def test_a_1000x_spike_gets_a_log_axis_that_keeps_the_baseline_readable() -> None:
    baseline = [2.8 + 0.01 * (step % 7) for step in range(1000)]
    scale = choose_scale([*baseline, *[2840.0] * 80])
    assert scale.kind == "log"
    # A 25 % move at the baseline must still move the line by 3 % of the panel's height.
    assert scale.fraction(3.5) - scale.fraction(2.8) > 0.03
    assert scale.fraction(2840.0) < 1.0


def test_outliers_next_to_zeros_clip_the_axis_and_are_labelled(tmp_path: Path) -> None:
    scale = choose_scale([*[1.0] * 200, *[0.0] * 10, 500.0])
    assert scale.kind == "clipped"
    assert scale.high < 2.0 and scale.fraction(1.0) > 0.6
    html = rendered("partial", tmp_path)["case.html"]
    assert "500 @ 200" in html
    assert (
        "axis clipped at 1.33; 1 point(s) above it are marked ▲ (largest 500 at step 200)" in html
    )
    assert "train/loss: 3 non-finite point(s) from step 297" in html


def test_smooth_loss_keeps_a_linear_axis() -> None:
    assert choose_scale([10.0 - step / 120 for step in range(900)]).kind == "linear"


def test_story_shows_each_event_offset_from_the_spike_peak(tmp_path: Path) -> None:
    html = rendered("incident", tmp_path)["case.html"]
    for offset in ("10 before peak", "2 before peak", "at peak", "40 after peak", "80 after peak"):
        assert f'<td class="nowrap">{offset}</td>' in html
    assert "<h3>Outside any spike</h3>" in html  # the resume belongs to no spike


def test_layers_section_only_when_the_case_has_layers(tmp_path: Path) -> None:
    healthy = rendered("healthy", tmp_path / "healthy")
    partial = rendered("partial", tmp_path / "partial")
    assert 'id="layers"' not in healthy["case.html"] and "case-layers.svg" not in healthy
    assert 'id="layers"' in partial["case.html"]
    assert "<h3>Top layers by update-to-weight ratio</h3>" in partial["case.html"]
    heatmap = partial["case-layers.svg"]
    assert "log colour scale" in heatmap and "#111111" in heatmap  # NaN cell drawn black


def test_healthy_run_reads_as_nothing_to_do(tmp_path: Path) -> None:
    files = rendered("healthy", tmp_path)
    assert "Nothing to do: no finding calls for action." in files["case.md"]
    assert 'class="badge status-healthy"' in files["case.html"]
    assert 'class="badge severity-warning"' not in files["case.html"]
    assert 'class="badge severity-critical"' not in files["case.html"]


def test_only_requested_formats_are_written(tmp_path: Path) -> None:
    assert render_case(healthy_case(), tmp_path, ("json",)) == [tmp_path / "case.json"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["case.json"]


def test_unknown_format_is_a_usage_error_listing_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"'pdf'.*html, md, json"):
        render_case(healthy_case(), tmp_path, ("html", "pdf"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON (Expecting property name"),
        ("[1, 2]", "not a tscope case file"),
        ('{"schema_version": "2"}', "case schema 2 is not schema 1"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_unreadable_case_file_names_the_file_in_one_line(
    tmp_path: Path, content: str | bytes | None, problem: str
) -> None:
    case_file = tmp_path / "case.json"
    if isinstance(content, bytes):
        case_file.write_bytes(content)
    elif content is not None:
        case_file.write_text(content, encoding="utf-8")
    with pytest.raises(UnreadableInput) as caught:
        load_case_payload(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"Cannot read {case_file}: {problem}")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.8412, "2.84"),
        (1234.5, "1230"),
        (999.96, "1000"),
        (0.0012345, "0.00123"),
        (3e-4, "3e-4"),
        (2.84e6, "2.84e6"),
        (-0.5, "-0.5"),
        (0.0, "0"),
        (12, "12"),
        ("nan", "NaN"),
        ("-inf", "-Inf"),
        (None, "—"),
        (True, "yes"),
    ],
)
def test_numbers_have_three_significant_digits(value: Any, text: str) -> None:
    assert format_number(value) == text


def test_steps_are_integers() -> None:
    assert format_step(73.0) == "73"
    assert format_step(None) == "—"


def test_case_object_and_its_payload_render_the_same(tmp_path: Path) -> None:
    case = incident_case()
    assert isinstance(case, Case)
    from_case = render_case(case, tmp_path / "case")
    from_payload = render_case(case.to_dict(), tmp_path / "payload")
    for one, other in zip(from_case, from_payload, strict=True):
        assert one.read_bytes() == other.read_bytes(), one.name


def _reverse_key_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reverse_key_order(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_key_order(item) for item in value]
    return value


def test_the_golden_comparison_checks_the_inlined_stylesheets(tmp_path: Path) -> None:
    page = rendered("incident", tmp_path)["case.html"]
    assert inlined_stylesheets(page) == ["case.css"]
    tampered = page.replace("<style>\n", "<style>\nbody { display: none; }\n", 1)
    with pytest.raises(pytest.fail.Exception, match="no stylesheet has"):
        inlined_stylesheets(tampered)
