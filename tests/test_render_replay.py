"""The Replay section of case.html / case.md: what `tscope replay` found, read like an engineer.

The incident: corrupted_batch had six rows of step 145's batch replaced by random tokens. The
replayed case must say the replay reproduces the log, list those six rows with their gradient
shares, show that dropping them removes the spike while halving the learning rate does not, and
chart it all. Hand-built payloads (tests/test_render_replay_payloads.py) cover what the fixture
run cannot.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
from render_replay_helpers import SVG_NS, files_of, svg_text

from tscope.model.case import Case
from tscope.render import CHART_FILES, REPLAY_CHART_FILES, load_case_payload, render_case
from tscope.render.json_file import case_json_text

ROOT = Path(__file__).resolve().parents[1]


RUNS = ROOT / "fixtures" / "data" / "trainer"


@pytest.fixture(scope="module")
def replayed(
    tmp_path_factory: pytest.TempPathFactory, corrupted_batch_replays: Any
) -> tuple[dict[str, Any], Path, dict[str, str]]:
    """The case `tscope replay corrupted_batch --around 145 --what-if skip --what-if lr=0.5`
    writes, rendered into a folder: (payload, folder, file name -> text). The replays are the
    session's (conftest.corrupted_batch_replays), judged on these two what-ifs."""
    from tscope.replay_case import case_with_replay
    from tscope.replay_pipeline import judged

    found = judged(corrupted_batch_replays, ["skip", "lr=0.5"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
        case = case_with_replay(found, read_weights=False)
    out = tmp_path_factory.mktemp("replayed-case")
    files = files_of(render_case(case, out))
    return load_case_payload(out), out, files


def test_the_verdict_says_the_replay_reproduces_the_log(replayed) -> None:
    payload, _, files = replayed
    section = payload["replay"]
    first, last = section["steps"]
    checkpoint = section["checkpoint"]["path"]
    replayed_steps = len(section["per_step"])
    assert section["fidelity"]["reproduced"]
    expected = (
        f"Replayed steps {first}–{last} from <code>{checkpoint}</code> on cpu (deterministic): "
        f"reproduces the log — {replayed_steps} of {replayed_steps} steps compared"
    )
    assert expected in files["case.html"]
    assert 'class="badge replay-reproduced">reproduces the log<' in files["case.html"]
    assert f"Replayed steps {first}–{last} from `{checkpoint}`" in files["case.md"]
    # The committed run was recorded on another CPU: within the tolerance, not necessarily 0.
    shown = re.search(r"max relative loss difference (\S+) \(tolerance 1e-5\)", files["case.md"])
    assert shown is not None and float(shown.group(1)) <= 1e-5


def test_the_six_corrupted_rows_are_listed_with_their_gradient_share(replayed) -> None:
    payload, _, files = replayed
    planted = json.loads((RUNS / "corrupted_batch/manifest.json").read_text(encoding="utf-8"))
    indices = planted["planted"]["in_batch_indices"]
    rows = re.findall(
        r'<tr><td class="num">145</td><td class="num">(\d+)</td><td class="num">[\d.]+</td>'
        r'<td class="num">[\d.]+%</td></tr>',
        files["case.html"],
    )
    assert [int(row) for row in rows] == indices
    md_rows = re.findall(r"^\| 145 \| (\d+) \| [\d.]+ \| [\d.]+% \|$", files["case.md"], re.M)
    assert [int(row) for row in md_rows] == indices
    assert "skip_batches.json" in payload["replay"]["files"]
    assert "<code>skip_batches.json</code> in this folder lists these batches" in files["case.html"]
    assert "`skip_batches.json` in this folder lists these batches" in files["case.md"]


def test_the_what_ifs_say_dropping_the_rows_removes_the_spike_and_a_lower_lr_does_not(
    replayed,
) -> None:
    _, _, files = replayed
    html, markdown = files["case.html"], files["case.md"]
    dropped = "drop samples 2, 5, 11, 13, 17, 22 of step 145&#39;s batch"
    assert re.search(
        rf"<strong>skip 6 samples</strong>: {dropped}</td>.*?"
        r'<td class="removed-yes">yes \(\d+% of the excess\)</td>',
        html,
    )
    assert re.search(
        r"<strong>lr ×0.5</strong>: learning rate ×0.5 on steps 140–150</td>.*?"
        r'<td class="removed-no">no \(\d+% of the excess\)</td>',
        html,
    )
    assert "The what-if replays point at the data" in html
    skip_row = next(line for line in markdown.splitlines() if line.startswith("| **skip"))
    assert re.search(r"\| yes \(\d+% of the excess\) \|$", skip_row)
    assert "2, 5, 11, 13, 17, 22" in skip_row
    lr_row = next(line for line in markdown.splitlines() if line.startswith("| **lr"))
    assert re.search(r"\| no \(\d+% of the excess\) \|$", lr_row)
    assert "**The what-if replays point at the data" in markdown


def test_replay_charts_are_valid_svg_files_inlined_in_the_html_and_linked_from_markdown(
    replayed,
) -> None:
    _, out, files = replayed
    drawn = sorted(name for name in files if name.endswith(".svg"))
    assert set(REPLAY_CHART_FILES.values()) | {CHART_FILES["chart"]} <= set(drawn)
    for file_name in drawn:
        svg = files[file_name]
        assert (out / file_name).is_file()
        assert ElementTree.fromstring(svg).tag == f"{SVG_NS}svg"
        assert svg.strip() in files["case.html"]
        assert re.search(rf"!\[[^\]]+\]\({re.escape(file_name)}\)", files["case.md"]), file_name
    replay_text = svg_text(files["case-replay.svg"])
    assert "around 145" in replay_text and "replayed" in replay_text and "logged" in replay_text
    assert "what-if skip 6 samples" in svg_text(files["case-whatif.svg"])
    assert "spike line" in svg_text(files["case-whatif.svg"])
    layers_text = svg_text(files["case-replay-layers.svg"])
    for title in ("Gradient norm per layer", "Update-to-weight ratio per layer", "transformer.h.0"):
        assert title in layers_text


def test_the_files_written_are_listed_with_what_they_hold(replayed) -> None:
    payload, _, files = replayed
    for name in payload["replay"]["files"]:
        assert f'<tr><td class="nowrap"><code>{name}</code></td><td>' in files["case.html"]
        assert re.search(rf"^\| `{re.escape(name)}` \| \w", files["case.md"], re.M)


def test_tscope_report_rerenders_the_replayed_case_byte_for_byte(replayed, tmp_path) -> None:
    _, out, files = replayed
    again = files_of(render_case(load_case_payload(out), tmp_path))
    assert again == files


def test_the_replayed_case_reads_back_as_the_same_typed_case(replayed) -> None:
    payload, _, _ = replayed
    case = Case.from_dict(payload)
    assert case.to_dict() == payload
    assert case_json_text(case.to_dict()) == case_json_text(payload)
