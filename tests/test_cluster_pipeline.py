"""`tscope cluster` on real Trainer runs: the LR sweep (fixtures/data/sweep), the modded-nanogpt
records (../shared/realdata, skipped when absent), caching, bad input and read-only inputs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.cluster_pipeline import cluster
from tscope.model.case import Case
from tscope.render.json_file import case_json_text

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fixtures" / "data" / "sweep"
MODDED = ROOT.parent / "shared" / "realdata" / "modded_nanogpt" / "runs"
STABLE_RUNS = {"lr0.001_seed1234", "lr0.002_seed7", "lr0.003_seed1234", "lr0.005_seed7"}
DIVERGED_RUNS = {"lr5_seed7", "lr6_seed1234", "lr8_seed7", "lr12_seed1234"}


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep as a user would point at it: one folder per run holding only what the Trainer
    wrote (copies: tscope follows no link inside its input; manifest.json, which states the
    planted cause, is left out)."""
    runs = tmp_path_factory.mktemp("sweep") / "runs"
    for run in sorted(SWEEP.iterdir()):
        folder = runs / run.name
        folder.mkdir(parents=True)
        shutil.copy2(run / "trainer_state.json", folder / "trainer_state.json")
        shutil.copytree(run / "runs", folder / "runs")
    return runs


@pytest.fixture(scope="module")
def sweep_report(sweep_runs: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sweep-out")
    return cluster(sweep_runs, out, jobs=2), out


def test_the_sweep_splits_into_stable_and_unstable_runs(sweep_report):
    report, _ = sweep_report
    status = {p.name: p.status for p in report.profiles}
    assert {name for name, s in status.items() if s == "stable"} == STABLE_RUNS
    assert {name for name, s in status.items() if s == "unstable"} == DIVERGED_RUNS


def test_every_cached_run_case_reads_back_as_the_same_typed_case(sweep_report):
    _, out = sweep_report
    files = sorted((out / "runs").glob("*/case.json"))
    assert len(files) == len(STABLE_RUNS | DIVERGED_RUNS)
    for file in files:
        payload = json.loads(file.read_text(encoding="utf-8"))
        case = Case.from_dict(payload)
        assert case.to_dict() == payload, file.parent.name
        assert case_json_text(case.to_dict()) == case_json_text(payload), file.parent.name


def test_the_diverged_runs_form_one_cluster_explained_by_the_learning_rate(sweep_report):
    report, _ = sweep_report
    (only,) = report.clusters
    assert set(only.members) == DIVERGED_RUNS
    trait = only.traits[0]
    assert (trait.field, trait.op, trait.balanced_accuracy) == ("learning_rate", ">=", 1.0)
    assert trait.value == 5.0


def test_the_cluster_has_a_stable_counterexample_and_a_loss_band(sweep_report):
    report, _ = sweep_report
    (only,) = report.clusters
    counter = only.counterexample
    assert counter is not None and counter.stable_run in STABLE_RUNS
    assert counter.config_diff[0][0] == "learning_rate"
    assert only.band is not None and 0 in only.band.offsets
    zero = only.band.offsets.index(0)
    assert only.band.median[zero] >= 2.0


def test_cluster_json_has_the_contract_keys(sweep_report):
    report, _ = sweep_report
    payload = json.loads(json.dumps(report.to_dict()))
    for run in payload["runs"]:
        assert {
            "name",
            "path",
            "status",
            "first_signal",
            "explosion_step",
            "lead_steps",
            "config",
        } <= set(run)
        assert run["status"] in ("stable", "unstable")
    for item in payload["clusters"]:
        assert {
            "id",
            "label",
            "runs",
            "signals",
            "typical_lead_steps",
            "discriminant_traits",
            "loss_band",
            "counterexample",
        } <= set(item)
        assert {"steps", "median", "lower", "upper"} <= set(item["loss_band"])
        assert {"run", "stable_run", "config_distance", "config_diff"} <= set(
            item["counterexample"]
        )
        for trait in item["discriminant_traits"]:
            assert {"field", "value"} <= set(trait)


def test_a_second_call_reuses_every_fresh_case(sweep_report, sweep_runs):
    _, out = sweep_report
    again = cluster(sweep_runs, out, jobs=1)
    assert all(p.reused_case for p in again.profiles)
    assert [c.members for c in again.clusters] == [c.members for c in sweep_report[0].clusters]


def test_a_changed_run_is_analyzed_again(tmp_path):
    runs = tmp_path / "runs"
    for name in ("lr0.001_seed1234", "lr5_seed7"):
        shutil.copytree(SWEEP / name, runs / name)
    out = tmp_path / "out"
    cluster(runs, out, jobs=1)
    state = runs / "lr5_seed7" / "trainer_state.json"
    os.utime(state, ns=(state.stat().st_atime_ns, state.stat().st_mtime_ns + 10**9))
    again = {p.name: p.reused_case for p in cluster(runs, out, jobs=1).profiles}
    assert again == {"lr0.001_seed1234": True, "lr5_seed7": False}


def test_nothing_is_written_into_the_runs(sweep_runs, tmp_path):
    before = sorted(str(p) for p in sweep_runs.rglob("*"))
    cluster(sweep_runs, tmp_path / "out", jobs=1)
    assert sorted(str(p) for p in sweep_runs.rglob("*")) == before


def test_an_unreadable_run_is_skipped_and_the_rest_analyzed(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(SWEEP / "lr0.001_seed1234", runs / "good")
    (runs / "broken").mkdir()
    (runs / "broken" / "notes.txt").write_text("no metrics here\n", encoding="utf-8")
    report = cluster(runs, tmp_path / "out", jobs=1)
    assert [p.name for p in report.profiles] == ["good"]
    assert report.skipped and report.skipped[0]["run"] == "broken"
    assert any("could not be analyzed" in limit for limit in report.limits)


def test_a_run_read_in_part_is_marked_in_the_sweeps_report(tmp_path):
    """A run whose torch file could not be read was a plain "stable" in cluster.json, .md and
    .html with nothing on stderr (red team, session 29): only its own case listed the file."""
    runs = tmp_path / "runs"
    shutil.copytree(SWEEP / "lr0.001_seed1234", runs / "good")
    shutil.copytree(SWEEP / "lr0.001_seed1234", runs / "part")
    (runs / "part" / "step_50.pt").write_bytes(b"PK\x03\x04 truncated torch zip")
    out = tmp_path / "out"
    result = runner.invoke(app, ["cluster", str(runs), "--out", str(out), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "run part read in part: 1 file(s) not read" in result.output
    payload = json.loads((out / "cluster.json").read_text())
    assert {r["name"]: r["unread_files"] for r in payload["runs"]} == {"good": 0, "part": 1}
    assert "| `part` | stable (read in part: 1 file not read) |" in (out / "cluster.md").read_text()


@pytest.mark.skipif(not MODDED.is_dir(), reason="../shared/realdata is absent")
def test_modded_nanogpt_records_show_their_shared_spikes_as_data_aligned(tmp_path):
    report = cluster(MODDED, tmp_path / "out", jobs=2)
    assert all(p.status == "stable" for p in report.profiles)
    assert report.clusters == []
    found = {(e.first_step, e.last_step) for e in report.aligned_spikes}
    # The bumps the source documents (shared/realdata/README.md): every run, one data order.
    for documented in ((305, 306), (327, 328), (337, 338), (412, 413), (516, 517), (523, 524)):
        assert documented in found
    by_step = {e.first_step: e for e in report.aligned_spikes}
    assert len(by_step[305].runs) == len(report.profiles)
    finding = next(f for f in report.findings if f.step == 305)
    assert finding.category == "data_aligned_spike" and finding.source == "cluster"
    assert "same data in the same order" in finding.message


# --- the command ------------------------------------------------------------------------------

runner = CliRunner()


def test_cluster_command_writes_the_three_files(sweep_runs, tmp_path):
    out = tmp_path / "report"
    result = runner.invoke(
        app, ["cluster", str(sweep_runs), "--out", str(out), "--quiet", "-j", "1"]
    )
    assert result.exit_code == 0, result.output
    assert {"cluster.html", "cluster.md", "cluster.json"} <= {p.name for p in out.iterdir()}
    payload = json.loads((out / "cluster.json").read_text(encoding="utf-8"))
    assert payload["clusters"][0]["discriminant_traits"][0]["field"] == "learning_rate"


def test_cluster_refuses_to_write_inside_the_runs(sweep_runs):
    result = runner.invoke(app, ["cluster", str(sweep_runs), "--out", str(sweep_runs / "x")])
    assert result.exit_code == 2
    assert "never writes into an input" in result.output


def test_cluster_of_an_empty_folder_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["cluster", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "holds no runs" in result.output
    assert "Traceback" not in result.output


def test_cluster_of_only_unreadable_runs_exits_2(tmp_path):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "x.bin").write_bytes(b"\x00\x01garbage")
    result = runner.invoke(app, ["cluster", str(runs), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "could be analyzed" in result.output


def test_a_damaged_cached_case_is_rebuilt(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(SWEEP / "lr5_seed7", runs / "lr5_seed7")
    out = tmp_path / "out"
    cluster(runs, out, jobs=1)
    case_file = out / "runs" / "lr5_seed7" / "case.json"
    cached = json.loads(case_file.read_text(encoding="utf-8"))
    case_file.write_text("{truncated", encoding="utf-8")
    (again,) = cluster(runs, out, jobs=1).profiles
    assert not again.reused_case and again.status == "unstable"
    # A case of another schema version (or with a field of the wrong type) is analyzed again too.
    for key, value in (("schema_version", "2"), ("spikes", "none")):
        case_file.write_text(json.dumps({**cached, key: value}), encoding="utf-8")
        (rebuilt,) = cluster(runs, out, jobs=1).profiles
        assert not rebuilt.reused_case and rebuilt.status == "unstable", key
    (reused,) = cluster(runs, out, jobs=1).profiles
    assert reused.reused_case


def test_a_forged_cache_that_came_with_the_output_folder_is_not_reused(tmp_path, monkeypatch):
    """A diverged run's cached case swapped for a stable run's (its fingerprint, names, sizes and
    times, kept: a tarball carries them) is analyzed again, not reported stable; so is a whole
    cache sealed with another user's key (cluster_cache_seal.py)."""
    runs = tmp_path / "runs"
    for name in ("lr0.001_seed1234", "lr5_seed7"):
        shutil.copytree(SWEEP / name, runs / name)
    out = tmp_path / "out"
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(tmp_path / "my-cache"))
    first = {p.name: p.status for p in cluster(runs, out, jobs=1).profiles}
    assert first == {"lr0.001_seed1234": "stable", "lr5_seed7": "unstable"}
    for file in ("case.json", "series.npz"):
        shutil.copy2(out / "runs" / "lr0.001_seed1234" / file, out / "runs" / "lr5_seed7" / file)
    again = {p.name: p for p in cluster(runs, out, jobs=1).profiles}
    assert again["lr0.001_seed1234"].reused_case
    assert not again["lr5_seed7"].reused_case and again["lr5_seed7"].status == "unstable"
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(tmp_path / "another-users-cache"))
    assert not any(p.reused_case for p in cluster(runs, out, jobs=1).profiles)


def test_run_folder_names_never_collide():
    from tscope.cluster_pipeline import _unique_names

    names = _unique_names(["a b", "a_b", "a_b-2", "A_B", "x/y", ""])
    assert len({name.casefold() for name in names}) == len(names)
    assert names[:3] == ["a_b", "a_b-2", "a_b-2-2"]
