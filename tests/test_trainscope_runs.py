"""trainscope recordings as input: the real recorder's files (fixtures/make_trainscope_runs.py)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from tscope.model.layer_metrics import layer_metric_name
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainscope"
PLANTED = json.loads((DATA / "planted.json").read_text())["runs"]
ALERTS = ("warning", "critical")


def _case(name: str | Path):  # type: ignore[no-untyped-def]
    return analyze_run(DATA / name if isinstance(name, str) else name)


def test_the_recording_alone_is_a_run_with_global_layer_and_routing_series() -> None:
    analysis = _case("healthy")
    run = analysis.run
    assert [s.kind for s in run.sources] == ["trainscope"]
    steps, _ = run.series(LOSS)
    assert steps[0] == 0 and steps[-1] == 159 and steps.size == 160  # trainscope counts from 0
    assert run.has(GRAD_NORM) and run.has(LEARNING_RATE)
    _, lrs = run.series(LEARNING_RATE)
    assert lrs.max() == pytest.approx(3e-3)
    assert run.has(layer_metric_name("blocks.1.fc1.weight", "weight_norm"))
    assert run.has(layer_metric_name("moe.router.weight", "grad_norm"))
    # Activations are recorded every 5th step only; the nulls in between are not points.
    act_steps, _ = run.series(layer_metric_name("blocks.1.fc1.weight", "act_kurtosis"))
    assert 20 <= act_steps.size <= 40
    shares = [m for m in run.metric_names if m.startswith("moe/moe.router/expert_")]
    assert len(shares) == 4
    assert run.config["trainscope.detector"] == "changepoint"  # trainscope 1.8.1's default
    assert analysis.case.partial == []


def test_healthy_recording_gets_no_alarm_and_no_layer_or_router_finding() -> None:
    findings = _case("healthy").case.findings
    assert [f for f in findings if f.severity in ALERTS] == []
    assert not [f for f in findings if f.category in ("layer_origin", "router_collapse")]


def test_layer_lr_bug_names_the_planted_layer_before_the_loss() -> None:
    planted = PLANTED["layer_lr_bug"]
    findings = _case("layer_lr_bug").case.findings
    loss = [f for f in findings if f.category in ("loss_spike", "loss_divergence", "nan_loss")]
    assert loss and all(f.step is not None and f.step > planted["step"] for f in loss)
    origin = [f for f in findings if f.category == "layer_origin" and f.source == "logs"]
    assert len(origin) == 1
    found = origin[0]
    assert found.layer is not None and found.layer.startswith(planted["layer"])
    assert (
        found.step is not None
        and planted["step"] < found.step < found.evidence["loss_incident_step"]
    )
    assert found.evidence["lead_steps"] == found.evidence["loss_incident_step"] - found.step > 0
    # trainscope's own detections are listed as evidence.
    assert found.evidence["recorder_flagged_steps"]
    assert found.evidence["recorder_first_flag"] >= found.evidence["loss_incident_step"]


def test_router_collapse_at_the_planted_step_from_the_routing_shares() -> None:
    planted = PLANTED["router_collapse"]
    findings = _case("router_collapse").case.findings
    collapse = [f for f in findings if f.category == "router_collapse"]
    assert len(collapse) == 1
    assert collapse[0].step == planted["step"]
    assert collapse[0].layer == planted["block"]
    assert collapse[0].evidence["expert"] == planted["expert"]
    assert collapse[0].evidence["median_top_share_before"] < 0.9


def test_rng_pickles_are_never_unpickled(tmp_path: Path) -> None:
    run = tmp_path / "rec"
    shutil.copytree(DATA / "healthy", run)
    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (Path.touch, (marker,))

    (run / "rng_states").mkdir(exist_ok=True)
    (run / "rng_states" / "step_3.pkl").write_bytes(pickle.dumps(Trap()))
    analysis = _case(run)
    assert not marker.exists()
    assert any(c.kind == "pickles_not_read" for c in analysis.run.caveats)


def test_a_recording_cut_mid_write_keeps_its_rows_and_says_so(tmp_path: Path) -> None:
    """The recorder appends batches to a live IPC stream between compactions; a crash cuts the
    last one. Here the file is re-framed as two batches (as between compactions) and cut inside
    the second: the first batch's rows are kept and the file is listed as partial."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    run = tmp_path / "rec"
    shutil.copytree(DATA / "healthy", run)
    layer = run / "layers" / "blocks.0.fc1.weight.arrow"
    table = ipc.open_stream(layer.read_bytes()).read_all()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.slice(0, 80))
        writer.write_table(table.slice(80))
    data = sink.getvalue().to_pybytes()
    layer.write_bytes(data[: len(data) - 400])
    analysis = _case(run)
    steps, _ = analysis.run.series(layer_metric_name("blocks.0.fc1.weight", "grad_norm"))
    assert steps.tolist() == list(range(80))
    assert [p.path for p in analysis.case.partial] == ["layers/blocks.0.fc1.weight.arrow"]


def test_links_inside_a_recording_are_not_followed(tmp_path: Path) -> None:
    run = tmp_path / "rec"
    shutil.copytree(DATA / "healthy", run)
    outside = tmp_path / "outside.arrow"
    shutil.copy(run / "layers" / "head.weight.arrow", outside)
    (run / "layers" / "elsewhere.arrow").symlink_to(outside)
    analysis = _case(run)
    assert not analysis.run.has(layer_metric_name("elsewhere", "grad_norm"))
    assert [p.path for p in analysis.case.partial] == ["layers/elsewhere.arrow"]


def test_a_meta_json_nested_deep_is_one_partial_line(tmp_path: Path) -> None:
    # Read with plain json.loads, 100,000 levels once ended in a RecursionError traceback.
    run = tmp_path / "rec"
    shutil.copytree(DATA / "healthy", run)
    (run / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    analysis = _case(run)
    problems = {p.path: p.problem for p in analysis.case.partial}
    assert "nested" in problems["meta.json"]
    assert analysis.run.series(LOSS)[0].size


def test_an_integer_wider_than_int64_in_meta_json_never_reaches_case_json(tmp_path: Path) -> None:
    # A 4,000-digit integer once went into case.json, which `tscope report` then refused.
    from tscope.render.report_files import read_payload

    run = tmp_path / "rec"
    shutil.copytree(DATA / "healthy", run)
    meta = json.loads((run / "meta.json").read_text())
    meta.setdefault("trainscope_config", {})["trace_every_n_steps"] = 10**30
    (run / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "case"
    from tscope.cli import app

    with pytest.raises(SystemExit) as exited:
        app(["analyze", str(run), "--out", str(out), "--quiet"])
    assert exited.value.code == 0
    read_payload(out, "case.json", "case", "analyze", "")  # raises if report would refuse it
