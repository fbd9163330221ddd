"""cluster.html / cluster.md / cluster.json: the sweep's answer on the first screen, escaping of
names strangers chose, charts that parse, byte-identical re-rendering, and a golden report.

The golden files (tests/golden/cluster/) come from a small hand-built ClusterReport, so that only
a change of the renderers (or of ClusterReport.to_dict) moves them; refresh after review with
`pytest tests/test_cluster_render.py --update-golden`.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from test_render import assert_matches_golden

from tscope.errors import UnreadableInput, UsageError
from tscope.model.case import Finding
from tscope.model.cluster import (
    AlignedSpike,
    ClusterReport,
    Counterexample,
    LossBand,
    LossCurve,
    RunCluster,
    RunProfile,
    Signal,
    Trait,
)
from tscope.render.cluster_report import load_cluster_payload, render_cluster

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fixtures" / "data" / "sweep"
SCRIPT_NAME = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
TRICKY_VALUE = "a|b `rm -rf /` c"  # a config value that would break a table and open a code span
SVG_NAMESPACE = "{http://www.w3.org/2000/svg}"


def _profile(
    name: str,
    losses: list[float],
    learning_rate: float,
    explosion_step: int | None = None,
    signals: tuple[Signal, ...] = (),
    note: str = "baseline",
) -> RunProfile:
    steps = np.arange(len(losses), dtype=np.int64)
    values = np.array(losses, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return RunProfile(
        name=name,
        path=f"sweep/{name}",
        status="stable" if explosion_step is None else "unstable",
        loss=LossCurve(steps, values),
        baseline_loss=4.0,
        explosion_step=explosion_step,
        explosion_kind=None if explosion_step is None else "above_baseline",
        failure_mode=None if explosion_step is None else "blowup",
        final_loss=float(finite[-1]),
        signals=signals,
        config={"learning_rate": learning_rate, "note": note},
        case_path=f"runs/{'script' if name == SCRIPT_NAME else name}/case.json",
    )


def synthetic_report() -> ClusterReport:
    """Four runs: two stable (one named like an XSS probe, with a `|` and backticks in its
    config), two that blew up together after a learning-rate signal, one shared loss spike."""
    calm = [4.0 - 0.02 * step for step in range(40)]
    spiky = list(calm)
    spiky[12] = 5.5  # the spike every run saw at step 12
    lr8 = [*spiky[:20], *(4.0 * 1.6 ** (step - 19) for step in range(20, 30)), *[float("nan")] * 10]
    lr9 = [*spiky[:18], *(4.0 * 1.4 ** (step - 17) for step in range(18, 40))]
    warning = Signal("lr_too_high", 17, "warning", "learning rate above the stable range")
    profiles = [
        _profile("lr0.001", spiky, 0.001),
        _profile(SCRIPT_NAME, spiky, 0.002, note=TRICKY_VALUE),
        _profile("lr8", lr8, 8.0, explosion_step=20, signals=(warning,)),
        _profile("lr9", lr9, 9.0, explosion_step=18, signals=(warning,)),
    ]
    band = LossBand(
        offsets=(-2, -1, 0, 1, 2, 3),
        median=(0.95, 0.96, 1.5, 2.4, 3.6, 5.1),
        lower=(0.9, 0.92, 1.4, 1.96, 2.74, 3.84),
        upper=(1.0, 1.0, 1.6, 2.56, 4.1, 6.55),
        runs_per_point=(2, 2, 2, 2, 2, 2),
    )
    cluster = RunCluster(
        id="C1",
        label="Blew up and never recovered (1 of 2 to NaN/Inf); learning_rate ≥ 8",
        members=("lr8", "lr9"),
        failure_mode="blowup",
        signals=(("lr_too_high", 2, -2),),
        typical_lead_steps=2,
        warned_members=2,
        traits=(Trait("learning_rate", ">=", 8.0, 1.0, (8.0, 9.0), (0.001, 0.002)),),
        band=band,
        counterexample=Counterexample(
            run="lr8",
            stable_run=SCRIPT_NAME,
            config_distance=2,
            config_diff=(("learning_rate", 8.0, 0.002), ("note", "baseline", TRICKY_VALUE)),
        ),
    )
    spike = AlignedSpike(
        first_step=12,
        last_step=12,
        runs=("lr0.001", SCRIPT_NAME, "lr8", "lr9"),
        peak_steps=(12, 12, 12, 12),
        runs_compared=4,
        p_value=1.2e-5,
        shared_data_order="yes",
        data_order_evidence="data_seed 1234 in every run",
    )
    finding = Finding(
        category="data_aligned_spike",
        severity="info",
        confidence=0.9,
        step=12,
        layer=None,
        message="Loss spikes at step 12 in 4 of 4 runs | same batch.",
        evidence={},
        suggestion="Run `tscope replay lr8 --around 12` to name the samples.",
        source="cluster",
    )
    return ClusterReport(
        runs_dir="sweep",
        profiles=profiles,
        clusters=[cluster],
        aligned_spikes=[spike],
        findings=[finding],
        skipped=[{"run": "broken|run", "problem": "no metrics\nfound"}],
        limits=["1 of 5 runs could not be analyzed (broken|run)."],
        summary={
            "verdict": "2 of 4 runs blew up, all the same way; they have learning_rate ≥ 8.",
            "runs": 4,
            "stable": 2,
            "unstable": 2,
            "clusters": 1,
            "aligned_spikes": 1,
        },
        method={"traits": "single-field rules scored by balanced accuracy ≥ 0.8"},
        tool_version="test",
    )


def render_synthetic(out_dir: Path) -> dict[str, str]:
    """The synthetic report, with lr8's case.html next to its case.json (so it gets a link)."""
    for run in ("lr8", "script"):
        (out_dir / "runs" / run).mkdir(parents=True)
        (out_dir / "runs" / run / "case.json").write_text("{}", encoding="utf-8")
    (out_dir / "runs" / "lr8" / "case.html").write_text("<html></html>", encoding="utf-8")
    paths = render_cluster(synthetic_report(), out_dir)
    return {path.name: path.read_text(encoding="utf-8") for path in paths}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8-run learning-rate sweep, analyzed and rendered once (about 3 s)."""
    from tscope.cluster_pipeline import cluster

    out_dir = tmp_path_factory.mktemp("sweep-cluster")
    render_cluster(cluster(SWEEP, out_dir, jobs=1), out_dir)
    return out_dir


def read(directory: Path, name: str) -> str:
    return (directory / name).read_text(encoding="utf-8")


def test_sweep_first_screen_says_which_setting_made_the_runs_blow_up(sweep_dir: Path) -> None:
    payload = load_cluster_payload(sweep_dir)
    html = read(sweep_dir, "cluster.html")
    first_screen = html.split('<section id="all-runs">', 1)[0]
    assert payload["summary"]["verdict"] in first_screen
    assert "learning_rate ≥ 5" in first_screen
    assert "4 of 8 blew up" in first_screen
    assert "<code>lr5_seed7</code> blew up, <code>lr0.005_seed7</code> did not" in first_screen
    markdown = read(sweep_dir, "cluster.md")
    assert "**learning\\_rate ≥ 5**" in markdown
    assert "`lr5_seed7` blew up, `lr0.005_seed7` did not; 1 setting differs" in markdown


def test_sweep_charts_draw_the_band_and_parse_as_svg(sweep_dir: Path) -> None:
    aligned = read(sweep_dir, "cluster-aligned-1.svg")
    overview = read(sweep_dir, "cluster-chart.svg")
    for svg in (aligned, overview):
        root = ElementTree.fromstring(svg)
        assert root.tag == f"{SVG_NAMESPACE}svg"
        assert svg.strip() in read(sweep_dir, "cluster.html")  # the same drawing, inline
    polygons = ElementTree.fromstring(aligned).iter(f"{SVG_NAMESPACE}polygon")
    assert any(polygon.get("class") == "band" for polygon in polygons)
    assert 'class="band-median"' in aligned
    assert 'class="nonfinite"' in overview  # three of the runs went to NaN
    assert 'class="explosion"' in overview


def test_sweep_runs_link_the_case_pages_that_exist(sweep_dir: Path) -> None:
    html = read(sweep_dir, "cluster.html")
    unstable = ("lr12_seed1234", "lr5_seed7", "lr6_seed1234", "lr8_seed7")
    # Stable runs get their page too: the reader compares a blow-up with its nearest stable run.
    stable = ("lr0.001_seed1234", "lr0.002_seed7", "lr0.003_seed1234", "lr0.005_seed7")
    for run in (*unstable, *stable):
        assert (sweep_dir / "runs" / run / "case.html").is_file()
        assert f'<a href="runs/{run}/case.html">case.html</a>' in html


def test_sweep_counts_nan_runs_alike_and_does_not_call_consequences_warnings(
    sweep_dir: Path,
) -> None:
    """Issue 10: "2 run(s) logged NaN" beside "3 of 4 to NaN/Inf", under "Warning signs" that
    all came after the explosion."""
    markdown = read(sweep_dir, "cluster.md")
    assert "(3 of 4 to NaN/Inf)" in markdown  # the cluster's label, from every logged step
    assert "- 3 of 4 runs logged NaN/Inf loss; 2 within the steps shown" in markdown  # aligned
    assert "run(s)" not in markdown
    assert "### Warning signs" not in markdown
    assert "### Signals (all at or after the explosion: no warning sign)" in markdown


def test_rerendering_from_cluster_json_gives_the_same_bytes(sweep_dir: Path) -> None:
    names = ("cluster.html", "cluster.md", "cluster.json", "cluster-chart.svg")
    names += ("cluster-aligned-1.svg",)
    first = {name: read(sweep_dir, name) for name in names}
    render_cluster(load_cluster_payload(sweep_dir / "cluster.json"), sweep_dir)
    assert {name: read(sweep_dir, name) for name in names} == first


@pytest.mark.parametrize("file_name", ["cluster.html", "cluster.md", "cluster.json"])
def test_synthetic_report_matches_golden_file(
    file_name: str, tmp_path: Path, update_golden: bool
) -> None:
    files = render_synthetic(tmp_path)
    assert_matches_golden("cluster", file_name, files[file_name], update_golden)


def test_cluster_json_is_sorted_strict_json_and_rerenders_identically(tmp_path: Path) -> None:
    files = render_synthetic(tmp_path)
    text = files["cluster.json"]
    payload = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in cluster.json"))
    assert text == json.dumps(payload, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert "nan" in payload["chart"]["runs"][0]["values"]  # lr8's NaN, kept as a string
    again = render_cluster(load_cluster_payload(tmp_path), tmp_path)
    assert {path.name: path.read_text(encoding="utf-8") for path in again} == files


def test_html_escapes_run_names_and_config_values(tmp_path: Path) -> None:
    html = render_synthetic(tmp_path)["cluster.html"]
    assert "<script" not in html.lower()
    assert f"<code>{ESCAPED_SCRIPT}</code> (stable)" in html  # counterexample table heading
    assert f'<td class="name"><code>{ESCAPED_SCRIPT}</code></td>' in html  # runs table
    assert f"<title>{ESCAPED_SCRIPT}</title>" in html  # the run's curve in the inline SVG
    # A config value prints as written: its backticks are not turned into a code span.
    assert "<td>a|b `rm -rf /` c</td>" in html
    # Messages do get code spans, escaped inside.
    assert "<code>tscope replay lr8 --around 12</code>" in html


def test_markdown_escapes_names_and_keeps_table_rows_whole(tmp_path: Path) -> None:
    markdown = render_synthetic(tmp_path)["cluster.md"]
    prose = re.sub(r"(`+).+?\1", "", markdown)  # code spans print literally; check the rest
    assert not re.search(r"(?<!\\)<[A-Za-z/!]", prose), "raw HTML tag in cluster.md"
    assert not re.search(r"(?<!\\)&[A-Za-z#]", prose), "raw HTML entity in cluster.md"
    # Run names are code spans: GitHub prints them as written, markup and all.
    assert f"`{SCRIPT_NAME}` did not; 2 settings differ" in markdown
    counterexample = markdown.split("### Nearest stable run", 1)[1].split("\n![", 1)[0]
    rows = [line for line in counterexample.splitlines() if line.startswith("|")]
    assert len(rows) == 4  # header, separator, learning_rate, note
    assert {len(re.findall(r"(?<!\\)\|", row)) for row in rows} == {4}  # 3 columns everywhere
    # The pipe is escaped; the backticked part stays a code span, as md_cell does in case.md.
    assert rows[3] == r"| `note` | baseline | a\|b `rm -rf /` c |"
    skipped = markdown.split("### Runs left out", 1)[1].split("\n## ", 1)[0]
    assert r"| `broken\|run` | no metrics found |" in skipped


def test_svg_files_are_valid_xml_with_names_as_text(tmp_path: Path) -> None:
    files = render_synthetic(tmp_path)
    assert set(files) >= {"cluster-chart.svg", "cluster-aligned-1.svg"}
    for name in ("cluster-chart.svg", "cluster-aligned-1.svg"):
        root = ElementTree.fromstring(files[name])
        assert not [element for element in root.iter() if element.tag.endswith("script")]
    overview = ElementTree.fromstring(files["cluster-chart.svg"])
    assert SCRIPT_NAME in "".join(overview.itertext())
    assert 'class="aligned-spikes"' in files["cluster-chart.svg"]
    assert ">A1</text>" in files["cluster-chart.svg"]


def test_all_stable_sweep_has_no_cluster_section_or_aligned_chart(tmp_path: Path) -> None:
    report = synthetic_report()
    report.profiles = [profile for profile in report.profiles if profile.status == "stable"]
    report.clusters = []
    report.summary = {"verdict": "All 2 runs are stable."}
    written = {path.name for path in render_cluster(report, tmp_path)}
    assert written == {"cluster.html", "cluster.md", "cluster.json", "cluster-chart.svg"}
    html = read(tmp_path, "cluster.html")
    assert "No run blew up: there is nothing to cluster." in html
    assert "All 2 stable" in html
    assert "2 runs · all stable · 1 aligned spike" in html


def test_only_the_formats_asked_for_are_written(tmp_path: Path) -> None:
    written = render_cluster(synthetic_report(), tmp_path, ("json",))
    assert [path.name for path in written] == ["cluster.json"]
    with pytest.raises(UsageError, match="Unknown report format 'pdf'"):
        render_cluster(synthetic_report(), tmp_path, ("pdf",))


def test_loading_a_file_that_is_not_a_cluster_report_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(UnreadableInput, match="Point at the folder `tscope cluster --out` wrote"):
        load_cluster_payload(tmp_path)
    broken = tmp_path / "cluster.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(UnreadableInput, match=r"not valid JSON .* Re-run `tscope cluster`"):
        load_cluster_payload(broken)
    case_file = tmp_path / "case.json"
    case_file.write_text('{"schema_version": "1", "run": {}}', encoding="utf-8")
    with pytest.raises(UnreadableInput, match="not a tscope cluster file"):
        load_cluster_payload(case_file)
    future = tmp_path / "future.json"
    future.write_text('{"schema_version": "9", "runs": [], "clusters": []}', encoding="utf-8")
    with pytest.raises(UnreadableInput, match="cluster schema 9 is not schema 1"):
        load_cluster_payload(future)


def test_a_cluster_file_with_a_field_of_the_wrong_type_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    render_cluster(synthetic_report(), tmp_path, ("json",))
    payload = json.loads((tmp_path / "cluster.json").read_text(encoding="utf-8"))
    payload["runs"][2]["lead_steps"] = "soon"
    broken = tmp_path / "edited.json"
    broken.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(UnreadableInput, match=r"cluster\.runs\[2\]\.lead_steps is a str"):
        load_cluster_payload(broken)
    del payload["runs"][2]["lead_steps"]  # a field left out is read as unknown, not refused
    assert "lr8" in render_cluster(payload, tmp_path / "again", ("md",))[-1].read_text()


def test_tscope_report_re_renders_a_cluster_report_folder(sweep_dir: Path, tmp_path: Path) -> None:
    # A new user pointed `tscope report` at the cluster folder and was told to point it at the
    # folder `tscope analyze --out` wrote.
    from typer.testing import CliRunner

    from tscope.cli import app

    before = read(sweep_dir, "cluster.md")
    (sweep_dir / "cluster.md").unlink()
    result = CliRunner().invoke(app, ["report", str(sweep_dir)])
    assert result.exit_code == 0, result.output
    assert read(sweep_dir, "cluster.md") == before
    elsewhere = tmp_path / "again"
    result = CliRunner().invoke(app, ["report", str(sweep_dir), "--out", str(elsewhere)])
    assert result.exit_code == 0, result.output
    # Elsewhere the per-run cases stay beside the original: the same report, their links as text.
    assert read(elsewhere, "cluster.md").splitlines()[0] == before.splitlines()[0]
