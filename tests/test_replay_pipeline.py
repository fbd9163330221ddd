"""`tscope replay` end to end on real Trainer runs with planted causes: the replay names the
corrupted samples, the what-if replays answer "data or state?", a bad resume is caught, and the
stable control stays quiet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from any_cpu import like_another_cpu
from typer.testing import CliRunner

from tscope.cli import app
from tscope.output_writer import write_replay_files
from tscope.replay_case import case_with_replay
from tscope.replay_pipeline import check_resumes, investigate, judged

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "data" / "trainer"
ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"


def manifest(name: str) -> dict:
    return json.loads((RUNS / name / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory, corrupted_batch_replays):
    # The session's replays (conftest.corrupted_batch_replays), judged on all three what-ifs.
    found = judged(corrupted_batch_replays, ["skip", "from=60", "lr=0.5"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
        case = case_with_replay(found)
    out = tmp_path_factory.mktemp("corrupted-case")
    return found, case, out, write_replay_files(found, out)


@pytest.fixture(scope="module")
def lr_jump():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSCOPE_FIXTURE_RUN", "lr_jump")
        factor = manifest("lr_jump")["planted"]["factor"]
        return investigate(RUNS / "lr_jump", 151, ENTRY, what_ifs=["skip", f"lr={1 / factor}"])


def test_the_replay_reproduces_the_log_and_names_the_corrupted_samples(corrupted):
    found, _, _, _ = corrupted
    assert found.result.fidelity.reproduced
    planted = manifest("corrupted_batch")["planted"]
    flagged = [(s.step, s.index) for s in found.result.bad_samples]
    assert flagged == [(planted["step"], i) for i in planted["in_batch_indices"]]


def test_the_best_explanation_is_the_bad_batch_with_its_indices(corrupted):
    _, case, _, _ = corrupted
    first = case.findings[0]
    assert (first.category, first.step, first.source) == ("bad_batch", 145, "replay")
    assert first.evidence["indices"] == [2, 5, 11, 13, 17, 22]
    assert "a bad batch" in case.summary.verdict  # the cause in words; its id on the card
    assert case.summary.card.cause.category == "bad_batch"


def test_the_restart_advice_fits_a_trainer_run(corrupted):
    # A Trainer reads no skip list: the advice is to drop the rows, not Lightning's file alone.
    _, case, _, _ = corrupted
    first = case.findings[0]
    assert "drop their rows from the dataset" in first.suggestion


def test_the_what_ifs_say_data_for_the_corrupted_batch(corrupted):
    found, _, _, _ = corrupted
    outcomes = {o.name: o for o in found.result.interventions}
    assert outcomes["skip"].spike_removed  # dropping the flagged samples removes the spike
    assert not outcomes["from"].spike_removed  # an earlier state spikes on the same batch
    assert outcomes["from"].checkpoint_step == 60
    assert found.result.cause == "data"


def test_the_what_ifs_say_state_for_the_lr_jump(lr_jump):
    outcomes = {o.name: o for o in lr_jump.result.interventions}
    assert lr_jump.result.fidelity.reproduced
    assert lr_jump.result.bad_samples == ()
    assert outcomes["lr"].spike_removed  # the spike disappears under lr = 1/factor
    assert not outcomes["skip"].spike_removed  # skipping the spike batch does not help
    assert lr_jump.result.cause == "state"


def test_replay_files_are_written_to_the_case_folder_only(corrupted):
    _, _, out, written = corrupted
    names = {path.name for path in written}
    assert {"replay.json", "replay_steps.parquet", "skip_batches.json"} <= names
    assert json.loads((out / "skip_batches.json").read_text(encoding="utf-8")) == [143, 144]
    payload = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert {"checkpoint", "steps", "fidelity", "per_step", "bad_samples", "interventions"} <= set(
        payload
    )
    assert payload["fidelity"]["reproduced"] is True
    assert not any((RUNS / "corrupted_batch").glob("**/skip_batches.json"))
    assert not any((RUNS / "corrupted_batch").glob("**/replay.json"))


def test_per_step_layer_statistics_are_recorded(corrupted):
    found, case, _, _ = corrupted
    step = next(s for s in found.result.per_step if s.step == 145)
    statistics = {name for values in step.layers.values() for name in values}
    assert {"grad_norm", "update_ratio_per_step", "activation_max_abs"} <= statistics
    assert "attention_logit_max" in statistics
    assert case.replay is not None and case.replay.layer_series


def test_a_stable_run_gives_no_replay_warning(monkeypatch):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "stable")
    found = investigate(RUNS / "stable", 145, ENTRY, what_ifs=["skip"])
    assert found.result.fidelity.reproduced
    assert found.result.bad_samples == ()
    assert [f for f in found.findings if f.severity != "info"] == []
    assert found.result.cause is None


def test_check_resume_catches_the_resume_that_dropped_the_optimizer_state(monkeypatch):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "resumed_lr_restart")
    results, findings = check_resumes(RUNS / "resumed_lr_restart", ENTRY)
    assert [r.checkpoint_step for r in results] == [120]
    (finding,) = findings
    assert (finding.category, finding.step) == ("replay_mismatch", 121)
    assert finding.evidence["reasons"] == ["resume_dropped_state"]
    assert "scheduler.pt" in finding.message


runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--around", "145"], "needs --entry"),
        (["--around", "145", "--entry", str(ENTRY), "--what-if", "dance"], "Unknown --what-if"),
        (["--around", "145", "--entry", str(ENTRY), "--window", "5:-5"], "--window"),
        (["--entry", str(ENTRY)], "--around"),
    ],
)
def test_replay_usage_errors_are_one_line_and_exit_2(args, needle, tmp_path):
    result = runner.invoke(
        app, ["replay", str(RUNS / "corrupted_batch"), *args, "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output


def test_replay_refuses_to_write_into_the_run():
    result = runner.invoke(
        app,
        [
            "replay",
            str(RUNS / "corrupted_batch"),
            "--around",
            "145",
            "--entry",
            str(ENTRY),
            "--out",
            str(RUNS / "corrupted_batch" / "case"),
        ],
    )
    assert result.exit_code == 2 and "never writes into an input" in result.output


def test_an_inf_planted_in_one_layer_is_traced_to_that_module(tmp_path, monkeypatch):
    """A real safetensors checkpoint with one weight set to inf: nonfinite_origin names it."""
    import shutil

    from safetensors.torch import load_file, save_file

    run = tmp_path / "stable"
    shutil.copytree(RUNS / "stable", run)
    weights = run / "checkpoint-120" / "model.safetensors"
    tensors = load_file(weights)
    tensors["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("inf")
    save_file(tensors, weights, metadata={"format": "pt"})
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "stable")
    found = investigate(run, 123, ENTRY, window=(-2, 0))
    origin = next(f for f in found.findings if f.category == "nonfinite_origin")
    assert (origin.step, origin.layer) == (121, "transformer.h.1.mlp.c_fc")
    assert origin.evidence["phase"] == "forward"
    assert not found.result.fidelity.reproduced  # the run never had that inf
    assert any(f.category == "replay_mismatch" for f in found.findings)


NONFINITE_ONSET_SLACK_STEPS = 3  # as in test_replay_core


@pytest.mark.parametrize("another_cpu", [False, True], ids=["this_cpu", "another_cpu"])
def test_the_blowup_run_shows_where_nan_starts_and_the_attention_logits(monkeypatch, another_cpu):
    if another_cpu:
        like_another_cpu(monkeypatch)
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "lr_blowup")
    found = investigate(RUNS / "lr_blowup", 185, ENTRY, window=(-4, 4), what_ifs=[])
    categories = {f.category: f for f in found.findings}
    # 183 on the recording CPU; where a run diverges, rounding moves the overflow by a step or two
    # from one CPU to another (185 measured on a second machine).
    assert abs(categories["nonfinite_origin"].step - 183) <= NONFINITE_ONSET_SLACK_STEPS
    assert categories["attention_logit_growth"].evidence["attention_logit_max"] >= 1e4


def test_replay_command_writes_the_case_replay_json_and_skip_list(tmp_path, monkeypatch):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
    out = tmp_path / "case"
    result = runner.invoke(
        app,
        [
            "replay",
            str(RUNS / "corrupted_batch"),
            "--around",
            "145",
            "--entry",
            str(ENTRY),
            "--what-if",
            "skip",
            "--no-stats",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "reproduces the log" in result.output
    assert {"case.html", "case.md", "case.json", "replay.json", "skip_batches.json"} <= {
        p.name for p in out.iterdir()
    }
    case = json.loads((out / "case.json").read_text(encoding="utf-8"))
    assert case["findings"][0]["category"] == "bad_batch"
    assert case["replay"]["cause"] == "data"


def test_one_replay_reads_and_parses_the_logs_once(tmp_path, monkeypatch):
    """A replay with a what-if and --check-resume (three replays and the case) reads every log
    file exactly once and the checkpoints' statistics once: the replays and the case share one
    read_inputs."""
    from tscope.ingest import inputs
    from tscope.ingest.checkpoints import evidence as checkpoint_evidence
    from tscope.ingest.registry import READERS
    from tscope.replay_pipeline import ReplayRequest, run

    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "resumed_lr_restart")
    parsed: list[str] = []
    for reader in READERS:

        def counted(path, shown, _read=reader.read):
            parsed.append(shown)
            return _read(path, shown)

        monkeypatch.setattr(reader, "read", counted)
    statistics_reads: list[Path] = []

    def counted_checkpoints(root, options, progress=None):
        statistics_reads.append(root)
        return checkpoint_evidence.read_checkpoints(root, options, progress)

    monkeypatch.setattr(inputs, "read_checkpoints", counted_checkpoints)
    outcome = run(
        ReplayRequest(
            RUNS / "resumed_lr_restart",
            around=150,
            entry=ENTRY,
            window=(-2, 0),
            what_ifs=("lr=0.5",),
            check_resume=True,
            statistics=False,
            out=tmp_path / "case",
        )
    )
    assert outcome is not None
    assert parsed and sorted(parsed) == sorted(set(parsed)), parsed
    assert len(statistics_reads) == 1
    # The resume check's finding is ranked into the case beside the replay's own.
    assert any((f.category, f.step) == ("replay_mismatch", 121) for f in outcome.case.findings)
    assert outcome.case.replay is not None and outcome.case.replay.resume_checks
    assert (tmp_path / "case" / "replay.json").is_file()
