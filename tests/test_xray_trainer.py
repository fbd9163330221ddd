"""tscope xray RUN_DIR: a real Trainer run's own step audited without an entry file.

The runs are written at test time by the real Trainer (tests/xray_trainer_run.py): one with
gradient_accumulation_steps=4, one trained on 2 processes (torchrun, gloo) with
average_tokens_across_devices=False.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.analyzers.xray import xray_findings
from tscope.cli import app
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.torchrun import free_port
from tscope.xray.trainer_run import read_settings, xray_trainer_run

MAKE_RUN = Path(__file__).resolve().parent / "xray_trainer_run.py"
LENGTHS = (3, 12, 5, 4, 9, 2, 7, 11)  # uneven: per-rank and per-micro-batch counts differ


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def accumulation_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("xray-ga4") / "run"
    subprocess.run(
        [sys.executable, str(MAKE_RUN), str(out), "--accumulation", "4"],
        check=True, capture_output=True, env=_environment(), timeout=600,
    )  # fmt: skip
    return out


# Launch attempts of the two-rank run: the port free_port() found can be taken before torchrun
# binds it (a fresh clone's CI failed the fixture once with exit 1; the same test passed at the
# same commit before and after), so a failed launch is retried once on a new port.
TWO_RANK_LAUNCHES = 2


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    failures = []
    for attempt in range(TWO_RANK_LAUNCHES):
        out = tmp_path_factory.mktemp(f"xray-dp2-{attempt}") / "run"
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
             f"--master_port={free_port()}", str(MAKE_RUN), str(out), "--accumulation", "2",
             "--no-average-tokens"],
            capture_output=True, env=_environment(), timeout=600,
        )  # fmt: skip
        if done.returncode == 0:
            return out
        failures.append(done.stderr.decode(errors="replace")[-2000:])
    raise AssertionError("the two-rank run failed every launch:\n" + "\n---\n".join(failures))


def test_a_trainer_run_with_accumulation_4_is_audited_without_an_entry(accumulation_run, tmp_path):
    decoded = torch_file_literals(accumulation_run / "checkpoint-1" / "training_args.bin")
    assert decoded["gradient_accumulation_steps"] == 4  # the run's own file
    out = tmp_path / "case"
    result = CliRunner().invoke(
        app,
        [
            "xray",
            str(accumulation_run),
            "--lengths",
            ",".join(map(str, LENGTHS)),
            "-o",
            str(out),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    xray = json.loads((out / "xray.json").read_text())
    assert xray["mode"] == "trainer" and xray["settings"]["gradient_accumulation_steps"] == 4
    assert xray["forward_calls"] == 4  # the Trainer's own accumulation loop: 4 micro-batches
    assert xray["matched_rule"] == "token_mean" and xray["intended_max_deviation"] < 1e-5
    assert xray["findings"] == []  # Trainer 5.x normalises by num_items_in_batch: correct
    case = json.loads((out / "case.json").read_text())
    assert case["xray"]["settings"]["model_class"] == "GPT2LMHeadModel"
    # The audit the user asked for leads the verdict, before the run's own logs.
    assert case["summary"]["verdict"].startswith("Token audit clean")


def test_a_model_without_loss_kwargs_gets_the_mean_of_micro_batch_means(accumulation_run):
    """The Trainer divides each micro-batch's mean by the accumulation steps when the model's
    forward does not take num_items_in_batch (a custom model without **kwargs)."""
    settings, _ = read_settings(accumulation_run)
    result = xray_trainer_run(
        accumulation_run, LENGTHS, replace(settings, model_accepts_loss_kwargs=False)
    )
    (finding,) = xray_findings(result)
    assert finding.category == "token_weighting_mismatch"
    assert finding.evidence["matched_rules"] == ["micro_batch_mean"]


def test_two_ranks_without_token_averaging_give_the_per_rank_mean(two_rank_run):
    settings, _ = read_settings(two_rank_run)
    assert (settings.world_size, settings.average_tokens_across_devices) == (2, False)
    result = xray_trainer_run(two_rank_run, LENGTHS)
    per_rank = Counter(t.rank for t in result.tokens)
    assert sorted(per_rank) == [0, 1] and per_rank[0] != per_rank[1]  # uneven tokens per rank
    n = len(result.tokens)
    expected = [n / (2 * per_rank[t.rank]) for t in result.tokens]  # closed form
    deviation = max(abs(t.weight - e) / e for t, e in zip(result.tokens, expected, strict=True))
    assert deviation < 1e-5
    (finding,) = xray_findings(result)
    assert finding.evidence["matched_rules"] == ["per_rank_mean"]
    assert "average_tokens_across_devices=True" in finding.suggestion
