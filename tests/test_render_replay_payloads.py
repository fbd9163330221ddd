"""The Replay section rendered from hand-built payloads: what the corrupted_batch fixture run cannot
show (a replay that does not reproduce the log, NaN losses, hostile layer names, what-ifs of every
kind), and a case without a replay renders exactly as before.

Refresh the golden files after reviewing a deliberate change:
`pytest tests/test_render_replay_payloads.py --update-golden`.
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
from render_replay_helpers import SVG_NS, files_of, svg_text
from test_render import assert_matches_golden

from tscope.commands import report
from tscope.errors import UnreadableInput
from tscope.model.replay_statistics import described
from tscope.output_writer import write_json
from tscope.render import FORMATS, REPLAY_CHART_FILES, render_case
from tscope.render.replay_names import what_if_label, what_if_words
from tscope.replay.stats.registry import REPLAY_STATISTICS

HOSTILE_LAYER = "<img src=x onerror=alert(1)>"


STEPS = list(range(121, 151))


SPIKE = 145


def replay_payload(**changes: Any) -> dict[str, Any]:
    """The incident case with a replay section shaped as replay_case.replay_section writes
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
    # What replay_case writes beside the series: the descriptors of those the observers declare.
    section["statistics"] = [
        s.to_dict() for s in described(section["layer_series"], REPLAY_STATISTICS)
    ]
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


def test_an_older_case_without_statistic_descriptors_reports_the_same(tmp_path: Path) -> None:
    """A case.json written before the replay section carried `statistics`: `tscope report` takes
    the descriptors from this tscope's observers, so the pages and the case.json it rewrites are
    those of a current case."""
    current = rendered(replay_payload(), tmp_path / "current")
    older = replay_payload()
    del older["replay"]["statistics"]
    (tmp_path / "older").mkdir()
    write_json(tmp_path / "older" / "case.json", older)
    written = files_of(report(tmp_path / "older", tmp_path / "again", FORMATS))
    assert written["case.html"] == current["case.html"]
    assert written["case.md"] == current["case.md"]
    assert written["case-replay-layers.svg"] == current["case-replay-layers.svg"]
    assert written["case.json"] == current["case.json"]
    assert json.loads(written["case.json"])["replay"]["statistics"][0]["title"] == "Gradient norm"
