"""The Replay section of case.html / case.md: what `tscope replay` found, read like an engineer.

The incident: corrupted_batch had six rows of step 145's batch replaced by random tokens. The
replayed case must say the replay reproduces the log, list those six rows with their gradient
shares, show that dropping them removes the spike while halving the learning rate does not, and
chart it all; a case without a replay must render exactly as before. Hand-built payloads cover
what the fixture run cannot: a replay that does not reproduce the log, NaN losses, hostile layer
names, what-ifs of every kind.

Refresh the golden files after reviewing a deliberate change:
`pytest tests/test_render_replay.py --update-golden`.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
from case_payloads import healthy_case, incident_case, partial_payload
from test_render import assert_matches_golden

from tscope.errors import UnreadableInput
from tscope.model.case import Case
from tscope.render import CHART_FILES, REPLAY_CHART_FILES, load_case_payload, render_case
from tscope.render.json_file import case_json_text
from tscope.render.replay_names import what_if_label, what_if_words

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "data" / "trainer"
ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"
HOSTILE_LAYER = "<img src=x onerror=alert(1)>"
SVG_NS = "{http://www.w3.org/2000/svg}"


def files_of(paths: list[Path]) -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in paths}


def svg_text(svg: str) -> str:
    return "".join(ElementTree.fromstring(svg).itertext())


# --- the real replay of corrupted_batch ------------------------------------------------------


@pytest.fixture(scope="module")
def replayed(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, Any], Path, dict[str, str]]:
    """The case `tscope replay corrupted_batch --around 145 --what-if skip --what-if lr=0.5`
    writes, rendered into a folder: (payload, folder, file name -> text)."""
    from tscope.replay_pipeline import case_with_replay, investigate

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
        found = investigate(RUNS / "corrupted_batch", 145, ENTRY, what_ifs=["skip", "lr=0.5"])
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


# --- hand-built payloads -----------------------------------------------------------------------

STEPS = list(range(121, 151))
SPIKE = 145


def test_the_replayed_case_reads_back_as_the_same_typed_case(replayed) -> None:
    payload, _, _ = replayed
    case = Case.from_dict(payload)
    assert case.to_dict() == payload
    assert case_json_text(case.to_dict()) == case_json_text(payload)


def replay_payload(**changes: Any) -> dict[str, Any]:
    """The incident case with a replay section shaped as replay_pipeline.replay_section writes
    it: 30 steps from checkpoint-120, a spike at 145, two what-ifs, twelve layers."""
    loss = [2.9 + 0.01 * (step % 3) + (0.5 if step == SPIKE else 0.0) for step in STEPS]
    grad = [0.5 + (1.5 if step == SPIKE else 0.0) for step in STEPS]
    layers = [f"model.layers.{i}.mlp" for i in range(11)] + [HOSTILE_LAYER]
    values = [
        [0.1 * (i + 1) * (3.0 if step == SPIKE and i == 11 else 1.0) for step in STEPS]
        for i in range(len(layers))
    ]
    section: dict[str, Any] = {
        "checkpoint": {"step": 120, "path": "checkpoint-120", "format": "hf_trainer"},
        "steps": [STEPS[0], STEPS[-1]],
        "around": SPIKE,
        "window": [-5, 5],
        "device": "cpu",
        "deterministic": True,
        "fidelity": {
            "compared_steps": 30,
            "max_abs_loss_diff": 0.0,
            "max_rel_loss_diff": 0.0,
            "reproduced": True,
            "tolerance": 1e-5,
            "bit_exact_steps": 30,
            "mismatched_steps": [],
            "first_mismatch_step": None,
            "reasons": [],
        },
        "restore": {
            "optimizer": True,
            "scheduler": True,
            "rng": True,
            "scaler": False,
            "lr_source": "log",
            "loss_path": "model",
            "notes": ["optimizer state restored from optimizer.pt"],
            "caveats": [],
        },
        "cause": "data",
        "per_step": [
            {
                "step": step,
                "loss": value,
                "logged_loss": value,
                "grad_norm": norm,
                "learning_rate": 1e-3,
                "update_skipped": False,
            }
            for step, value, norm in zip(STEPS, loss, grad, strict=True)
        ],
        "bad_samples": [
            {"step": SPIKE, "index": 7, "loss": 5.2, "share": 0.5},
            {"step": SPIKE, "index": 3, "loss": 5.1, "share": 0.4},
        ],
        "interventions": [
            {
                "name": "skip",
                "params": {"samples": {str(SPIKE): [3, 7]}},
                "peak_loss": 2.92,
                "peak_step": 144,
                "baseline_peak_loss": 3.42,
                "baseline_peak_step": SPIKE,
                "spike_line": 3.2,
                "reference_median": 2.91,
                "spike_removed": True,
                "checkpoint_step": 120,
                "losses": [[step, 2.9] for step in range(140, 151)],
            },
            {
                "name": "lr",
                "params": {"lr_factor": 0.5, "steps": [140, 150]},
                "peak_loss": 3.4,
                "peak_step": SPIKE,
                "baseline_peak_loss": 3.42,
                "baseline_peak_step": SPIKE,
                "spike_line": 3.2,
                "reference_median": 2.91,
                "spike_removed": False,
                "checkpoint_step": 120,
                "losses": [[step, 3.4 if step == SPIKE else 2.9] for step in range(140, 151)],
            },
        ],
        "layer_series": {
            "grad_norm": {"layers": layers, "steps": STEPS, "values": values},
            "activation_max_abs": {"layers": layers[:2], "steps": STEPS, "values": values[:2]},
            "router_entropy": {"layers": layers[:1], "steps": STEPS, "values": values[:1]},
        },
        "files": [
            "replay.json",
            "replay_steps.parquet",
            "replay_layers.parquet",
            "replay_samples.parquet",
            "skip_batches.json",
        ],
    }
    section.update(changes)
    payload = incident_case().to_dict()
    payload["replay"] = section
    return payload


def rendered(payload: dict[str, Any], out: Path) -> dict[str, str]:
    return files_of(render_case(payload, out))


def replay_part(markdown: str) -> str:
    return markdown.split("## Replay", 1)[1].split("\n## ", 1)[0]


def test_hand_built_replay_matches_golden_files(tmp_path: Path, update_golden: bool) -> None:
    files = rendered(replay_payload(), tmp_path)
    for file_name in ("case.html", "case.md", *REPLAY_CHART_FILES.values()):
        assert_matches_golden("replay", file_name, files[file_name], update_golden)


def test_a_hostile_layer_name_is_text_everywhere(tmp_path: Path) -> None:
    files = rendered(replay_payload(), tmp_path)
    html = files["case.html"]
    assert "<img" not in html.lower() and "onerror=alert(1)>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    svg = files["case-replay-layers.svg"]
    assert "<img" not in svg
    assert HOSTILE_LAYER in svg_text(svg)  # drawn as those characters, in a valid SVG
    markdown = files["case.md"]
    prose = re.sub(r"(`+).+?\1", "", markdown)  # code spans print literally; check the rest
    assert not re.search(r"(?<!\\)<[A-Za-z/!]", prose), "raw HTML tag in case.md"
    assert f"`{HOSTILE_LAYER}`" in markdown  # the largest grad_norm layer, as a code span


def test_the_hostile_layer_is_the_named_one_and_the_rest_are_grey(tmp_path: Path) -> None:
    files = rendered(replay_payload(), tmp_path)
    root = ElementTree.fromstring(files["case-replay-layers.svg"])
    labels = [element.text for element in root.iter(f"{SVG_NS}text")]
    assert "4 more layers" in labels  # 12 layers: 8 named, 4 grey
    assert HOSTILE_LAYER in labels and "model.layers.4.mlp" in labels
    assert "model.layers.3.mlp" not in labels  # grey: named only in its hover title
    assert "Also measured, not charted: router_entropy" in files["case.html"]
    # An unknown statistic still gets a row with a title made from its name.
    assert "Router entropy <code>router_entropy</code>" in files["case.html"]


def test_a_replay_that_does_not_reproduce_the_log_says_why(tmp_path: Path) -> None:
    fidelity = {
        "compared_steps": 30,
        "max_abs_loss_diff": 0.04,
        "max_rel_loss_diff": 0.0137,
        "reproduced": False,
        "tolerance": 1e-5,
        "bit_exact_steps": 0,
        "mismatched_steps": [130, 131],
        "first_mismatch_step": 130,
        "reasons": [
            {"code": "rng_state_missing", "message": "The checkpoint holds no RNG state."},
            {"code": "data_order", "message": "The entry's batches may not be the run's."},
        ],
    }
    files = rendered(replay_payload(fidelity=fidelity), tmp_path)
    verdict = (
        "does NOT reproduce the log — 30 of 30 steps compared, max relative loss difference "
        "0.0137 (tolerance 1e-5), first mismatch at step 130; most likely: The checkpoint holds "
        "no RNG state."
    )
    assert verdict in files["case.html"] and verdict in files["case.md"]
    assert 'class="badge replay-not_reproduced">does not reproduce the log<' in files["case.html"]
    assert (
        "<li>The entry&#39;s batches may not be the run&#39;s. (data_order)</li>"
        in files["case.html"]
    )
    assert "logged, not reproduced" in svg_text(files["case-replay.svg"])


def test_nothing_to_compare_is_not_called_reproduced(tmp_path: Path) -> None:
    fidelity = {"compared_steps": 0, "reproduced": False, "tolerance": 1e-5, "reasons": []}
    files = rendered(replay_payload(fidelity=fidelity), tmp_path)
    assert (
        "not compared with the log — no logged loss falls on the replayed steps."
        in files["case.md"]
    )
    assert "reproduces the log —" not in files["case.md"]


def test_nan_losses_and_skipped_updates_are_marked_on_the_chart(tmp_path: Path) -> None:
    payload = replay_payload()
    steps = payload["replay"]["per_step"]
    steps[-1]["loss"] = math.nan
    steps[-2]["grad_norm"] = math.inf
    steps[24]["update_skipped"] = True
    files = rendered(payload, tmp_path)
    svg = files["case-replay.svg"]
    root = ElementTree.fromstring(svg)
    assert root.findall(f".//{SVG_NS}g[@class='nonfinite']")
    assert "update skipped" in svg_text(svg)
    assert "steps whose update was skipped (145)" in files["case.md"]
    assert "NaN or Inf" in files["case.html"]


def test_restore_summary_names_what_was_and_was_not_restored(tmp_path: Path) -> None:
    restore = {
        "optimizer": False,
        "scheduler": False,
        "rng": True,
        "scaler": False,
        "lr_source": "constant",
        "loss_path": "default_causal_lm",
        "notes": [],
        "caveats": ["optimizer.pt is missing: Adam moments start from zero."],
    }
    markdown = rendered(replay_payload(restore=restore), tmp_path)["case.md"]
    part = replay_part(markdown)
    assert "Restored from `checkpoint-120`: model weights, RNG state." in part
    assert "Not restored: optimizer state, LR scheduler, gradient scaler." in part
    assert "Learning rate: constant (no schedule found; see the caveats)." in part
    assert "**Caveat**: optimizer.pt is missing: Adam moments start from zero." in part
    assert "How the replay was set up" not in part


@pytest.mark.parametrize(
    ("cause", "line"),
    [
        ("data", "point at the data"),
        ("state", "point at the state (optimizer, learning rate)"),
        (None, "do not single out data or state"),
    ],
)
def test_the_cause_line(cause: str | None, line: str, tmp_path: Path) -> None:
    files = rendered(replay_payload(cause=cause), tmp_path)
    assert line in files["case.html"] and line in files["case.md"]


def test_no_what_if_no_bad_sample_no_chart_for_them(tmp_path: Path) -> None:
    files = rendered(replay_payload(interventions=[], bad_samples=[], cause=None), tmp_path)
    assert "case-whatif.svg" not in files
    assert "No what-if was run." in files["case.md"] and "No sample stood out" in files["case.md"]
    assert "what-if replays do not single out" not in files["case.md"]


def test_resume_checks_get_a_table(tmp_path: Path) -> None:
    checks = [
        {
            "checkpoint": "checkpoint-180",
            "steps": [181, 185],
            "reproduced": False,
            "max_rel_loss_diff": 0.21,
        }
    ]
    markdown = rendered(replay_payload(resume_checks=checks), tmp_path)["case.md"]
    assert "| `checkpoint-180` | 181–185 | no | 0.21 |" in markdown


@pytest.mark.parametrize(
    ("name", "params", "label", "words"),
    [
        ("skip", {"samples": {"145": [2, 5]}}, "skip 2 samples", "drop samples 2, 5 of step 145"),
        ("skip", {"skipped_steps": [151]}, "skip update", "skip the update of step 151"),
        ("lr", {"lr_factor": 0.02, "steps": [146, 156]}, "lr ×0.02", "×0.02 on steps 146–156"),
        ("clip", {"max_grad_norm": 1.0, "steps": [140, 150]}, "clip 1", "clipped at 1 on steps"),
        ("from", {"from_step": 60}, "from step 60", "at or before step 60"),
        ("noise", {"sigma": 0.1}, "noise", 'noise ({"sigma": 0.1})'),
    ],
)
def test_what_ifs_in_words(name: str, params: dict[str, Any], label: str, words: str) -> None:
    assert what_if_label(name, params) == label
    assert words in what_if_words(name, params)


def test_a_case_without_replay_renders_as_before(tmp_path: Path, update_golden: bool) -> None:
    if update_golden:
        pytest.skip("comparing against the golden files, not writing them")
    for name, build in (
        ("incident", incident_case),
        ("healthy", healthy_case),
        ("partial", partial_payload),
    ):
        files = files_of(render_case(build(), tmp_path / name))
        assert not set(REPLAY_CHART_FILES.values()) & set(files)
        for file_name in ("case.html", "case.md", "case.json"):
            assert_matches_golden(name, file_name, files[file_name], update=False)


def test_odd_values_in_a_hand_edited_case_json_are_refused_in_one_line(tmp_path: Path) -> None:
    """A step that is markup, not a number, never reaches a page: Case.from_dict refuses it."""
    samples = [{"step": "<b>145</b>", "index": "1|2", "loss": "nan", "share": None}]
    with pytest.raises(UnreadableInput) as caught:
        rendered(replay_payload(bad_samples=samples), tmp_path / "out")
    message = str(caught.value)
    assert "case.replay.bad_samples[0].step is a str, not a number" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()


def test_a_non_finite_sample_loss_and_a_missing_share_are_shown_by_name(tmp_path: Path) -> None:
    samples = [{"step": 145, "index": 12, "loss": "nan", "share": None}]
    markdown = rendered(replay_payload(bad_samples=samples), tmp_path)["case.md"]
    row = next(line for line in replay_part(markdown).splitlines() if line.startswith("| 145 |"))
    assert row == "| 145 | 12 | NaN | — |"
