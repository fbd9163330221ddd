"""tscope xray on real code: the example entry files, a real Trainer run's own step, 2 ranks.

Each test is an incident the audit guards against (or its clean control): gradient accumulation
as a mean of micro-batch means, packing without document boundaries, position_ids whose packing
detection a cache silently turns off, data parallelism averaging per-rank means.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.analyzers.xray import xray_findings
from tscope.cli import app
from tscope.xray import xray_entry
from tscope.xray.probe import DEFAULT_LENGTHS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


def audit(name: str, lengths=DEFAULT_LENGTHS):
    result = xray_entry(EXAMPLES / f"xray_entry_{name}.py", lengths)
    return result, xray_findings(result)


def closed_form_micro_batch_mean(result):
    """Weight of each target, N / (M · T_m), from the micro-batch each token was seen in."""
    per_micro = Counter(t.micro_batch for t in result.tokens)
    n, m = len(result.tokens), len(per_micro)
    return [n / (m * per_micro[t.micro_batch]) for t in result.tokens]


def test_a_correct_token_mean_over_micro_batches_is_clean():
    result, findings = audit("token_mean")
    assert findings == []
    assert result.forward_calls == 2  # the step really split the batch
    assert result.fit("token_mean").max_deviation < 1e-5
    assert result.fit("micro_batch_mean").max_deviation > 0.1  # the probe tells them apart
    assert min(t.cosine for t in result.tokens) > 1 - 1e-6
    assert result.to_dict()["leak"]["max"] == 0.0


def test_the_mean_of_micro_batch_means_is_a_weighting_mismatch_matching_its_closed_form():
    result, findings = audit("micro_batch_mean")
    (finding,) = findings
    assert (finding.category, finding.severity, finding.source) == (
        "token_weighting_mismatch",
        "warning",
        "xray",
    )
    assert finding.evidence["matched_rules"] == ["micro_batch_mean"]
    assert "num_items_in_batch" in finding.suggestion
    expected = closed_form_micro_batch_mean(result)
    deviation = max(abs(t.weight - e) / e for t, e in zip(result.tokens, expected, strict=True))
    assert deviation < 1e-5
    assert len(set(expected)) == 2  # uneven micro-batches: two different weights


def test_packing_without_boundaries_leaks_gradient_between_sequences():
    result, findings = audit("packed_no_boundaries")
    assert [f.category for f in findings] == ["cross_sequence_leak"]
    matrix = result.leak_matrix
    # Causal attention: a later sequence's loss reaches every earlier one, never a later one.
    assert all(matrix[s][t] > 1e-3 for s in range(len(matrix)) for t in range(s))
    assert all(matrix[s][t] == 0.0 for s in range(len(matrix)) for t in range(s + 1, len(matrix)))


def test_position_ids_reset_with_use_cache_false_is_clean():
    result, findings = audit("packed_position_ids")
    assert findings == []
    assert result.to_dict()["leak"]["max"] == 0.0  # exactly: masked attention has gradient 0


def test_position_ids_reset_but_a_cache_created_turns_the_packing_detection_off():
    _, findings = audit("packed_with_cache")
    assert [f.category for f in findings] == ["cross_sequence_leak"]
    assert "use_cache=False" in findings[0].suggestion


def write_entry(folder: Path, body: str) -> Path:
    path = folder / "entry.py"
    path.write_text(
        "import torch\nimport torch.nn.functional as F\n\n"
        "def batch(sequences):\n"
        "    longest = max(len(s['input_ids']) for s in sequences)\n"
        "    pad = [longest - len(s['input_ids']) for s in sequences]\n"
        "    return {\n"
        "        'input_ids': torch.tensor([s['input_ids'] + [0] * p for s, p in zip(sequences, pad)]),\n"
        "        'attention_mask': torch.tensor([[1] * len(s['input_ids']) + [0] * p for s, p in zip(sequences, pad)]),\n"
        "        'labels': torch.tensor([s['labels'] + [-100] * p for s, p in zip(sequences, pad)]),\n"
        "    }\n\n" + body,
        encoding="utf-8",
    )
    return path


def test_label_smoothing_is_seen_as_a_changed_loss_not_a_reweighting(tmp_path):
    entry = write_entry(
        tmp_path,
        "def train_step(model, sequences):\n"
        "    b = batch(sequences)\n"
        "    logits = model(input_ids=b['input_ids'], attention_mask=b['attention_mask']).logits\n"
        "    F.cross_entropy(logits[:, :-1].flatten(0, 1), b['labels'][:, 1:].flatten(),\n"
        "                    ignore_index=-100, label_smoothing=0.1).backward()\n",
    )
    result = xray_entry(entry)
    (finding,) = xray_findings(result)
    assert finding.severity == "info" and finding.evidence["min_cosine"] < 0.999


def test_a_summed_loss_is_a_uniform_rescale_and_matches_an_intended_sum(tmp_path):
    body = (
        "def train_step(model, sequences):\n"
        "    b = batch(sequences)\n"
        "    logits = model(input_ids=b['input_ids'], attention_mask=b['attention_mask']).logits\n"
        "    F.cross_entropy(logits[:, :-1].flatten(0, 1), b['labels'][:, 1:].flatten(),\n"
        "                    ignore_index=-100, reduction='sum').backward()\n"
    )
    uniform = xray_findings(xray_entry(write_entry(tmp_path, body)))
    assert [(f.category, f.severity) for f in uniform] == [("token_weighting_mismatch", "info")]
    assert uniform[0].evidence["matched_rules"] == ["sum"]
    intended = xray_findings(xray_entry(write_entry(tmp_path, body + "\nintended = 'sum'\n")))
    assert intended == []


def test_packed_labels_crossing_a_boundary_are_flagged(tmp_path):
    entry = write_entry(
        tmp_path,
        "def train_step(model, sequences):\n"
        "    ids = [i for s in sequences for i in s['input_ids']]\n"
        "    pos = [p for s in sequences for p in range(len(s['input_ids']))]\n"
        "    labels = [label for s in sequences for label in s['labels']]  # no -100 at starts\n"
        "    model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]),\n"
        "          position_ids=torch.tensor([pos]), use_cache=False).loss.backward()\n",
    )
    findings = xray_findings(xray_entry(entry, (4, 6, 3)))
    boundary = [f for f in findings if "boundary_weight" in f.evidence]
    assert len(boundary) == 1 and boundary[0].severity == "warning"
    assert "-100" in boundary[0].suggestion
    # The extra boundary targets also dilute the step's mean (10 real targets of 12 counted) and
    # carry a sequence's loss into the previous sequence's last token.
    scaled = next(f for f in findings if f.severity == "info")
    assert abs(scaled.evidence["weight_min"] - 10 / 12) < 1e-4
    assert "cross_sequence_leak" in [f.category for f in findings]


def test_cli_writes_xray_json_and_the_case_section(tmp_path):
    out = tmp_path / "case"
    result = runner.invoke(
        app,
        ["xray", "--entry", str(EXAMPLES / "xray_entry_micro_batch_mean.py"), "--lengths",
         "3,11,6,4", "--out", str(out), "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    xray = json.loads((out / "xray.json").read_text())
    assert xray["matched_rule"] == "micro_batch_mean" and xray["lengths"] == [3, 11, 6, 4]
    assert len(xray["tokens"]) == 2 + 10 + 5 + 3
    case = json.loads((out / "case.json").read_text())
    assert case["findings"][0]["category"] == "token_weighting_mismatch"
    html = (out / "case.html").read_text()
    section = html[html.index('<section id="xray">') :]
    assert section.count("<svg") == 2  # the weight strips and the leak matrix
    assert "Token audit" in (out / "case.md").read_text()
    rerendered = runner.invoke(
        app, ["report", str(out), "--format", "html", "--out", str(tmp_path / "again")]
    )
    assert rerendered.exit_code == 0
    assert (tmp_path / "again" / "case.html").read_text() == html


@pytest.mark.parametrize(
    ("entry_text", "arguments", "words"),
    [
        ("x = 1\n", [], "defines no train_step"),
        (
            "def train_step(model, sequences):\n    raise RuntimeError('boom')\n",
            [],
            "train_step failed",
        ),
        (
            "def train_step(model, sequences):\n    pass\nintended = 'median'\n",
            [],
            "intended must be",
        ),
        ("def train_step(model, sequences):\n    pass\n", ["--lengths", "5,x"], "--lengths"),
        ("def train_step(model, sequences):\n    pass\n", ["--lengths", "1,4"], "at least 2"),
    ],
)
def test_bad_entries_and_arguments_exit_2_with_one_line(tmp_path, entry_text, arguments, words):
    entry = tmp_path / "entry.py"
    entry.write_text(entry_text, encoding="utf-8")
    result = runner.invoke(
        app, ["xray", "--entry", str(entry), "--out", str(tmp_path / "o"), *arguments]
    )
    assert result.exit_code == 2
    assert words in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_no_entry_and_no_trainer_run_exits_2(tmp_path):
    (tmp_path / "run").mkdir()
    none = runner.invoke(app, ["xray", "--out", str(tmp_path / "o")])
    not_trainer = runner.invoke(app, ["xray", str(tmp_path / "run"), "--out", str(tmp_path / "o2")])
    assert (none.exit_code, not_trainer.exit_code) == (2, 2)
    assert "training_args.bin" in not_trainer.stderr
