"""Cross-run analysis on synthetic sweeps where the cause is planted and known.

Profiles are built directly (no files): a loss curve per run, a config, and the case findings the
single-run analysis would have produced. Stable controls must never fire.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tscope.analyzers.cluster import cluster_runs, profile_run
from tscope.analyzers.cluster.aligned import aligned_spikes
from tscope.analyzers.cluster.traits import setting_fields
from tscope.model.case import Case
from tscope.model.cluster import LossCurve, RunProfile

STEPS = 600


def curve(seed: int, steps: int = STEPS, noise: float = 0.03) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.arange(1, steps + 1)
    return 3.0 + 7.0 * np.exp(-x / 80.0) + noise * rng.standard_t(4, size=steps)


def profile(
    name: str,
    values: np.ndarray,
    config: dict[str, object] | None = None,
    findings: list[dict[str, object]] | None = None,
    spikes: list[dict[str, object]] | None = None,
    first_step: int = 1,
) -> RunProfile:
    steps = np.arange(first_step, first_step + values.size, dtype=np.int64)
    case = {
        "schema_version": "1",
        "run": {"config": dict(config or {})},
        "findings": findings or [],
        "spikes": spikes or [],
        "change_points": [],
        "summary": {"verdict": ""},
    }
    return profile_run(
        name, f"/runs/{name}", Case.from_dict(case), LossCurve(steps, values.astype(np.float64))
    )


def blow_up(values: np.ndarray, at: int, nan_after: int | None = None) -> np.ndarray:
    out = values.copy()
    out[at:] = values[at:] * np.linspace(
        8.0, 80.0, values.size - at
    )  # 8× a trained loss: > 2× the start
    if nan_after is not None:
        out[nan_after:] = np.nan
    return out


# --- status -----------------------------------------------------------------------------------


def test_a_falling_loss_is_stable():
    assert profile("ok", curve(0)).status == "stable"


def test_a_nan_loss_is_unstable_from_its_first_nan():
    values = curve(1)
    values[400:] = np.nan
    run = profile("nan", values)
    assert (run.status, run.explosion_step, run.explosion_kind) == ("unstable", 401, "nonfinite")
    assert run.failure_mode == "blowup"


def test_a_loss_above_twice_its_start_is_unstable_at_the_first_point_above():
    run = profile("boom", blow_up(curve(2), 300))
    assert run.status == "unstable"
    assert run.explosion_step == 301
    assert run.explosion_kind == "above_baseline"


def test_one_point_above_twice_the_start_is_a_spike_not_a_blow_up():
    values = curve(3)
    values[300] = 40.0
    assert profile("blip", values).status == "stable"


def test_a_critical_divergence_finding_makes_a_run_unstable():
    finding = {"category": "loss_divergence", "severity": "critical", "step": 420, "message": ""}
    run = profile("slow", curve(4), findings=[finding])
    assert (run.status, run.explosion_step, run.failure_mode) == ("unstable", 420, "divergence")


def test_a_warning_divergence_does_not_make_a_run_unstable():
    finding = {"category": "loss_divergence", "severity": "warning", "step": 420, "message": ""}
    assert profile("elevated", curve(5), findings=[finding]).status == "stable"


def test_a_run_that_comes_back_to_its_level_recovered():
    values = curve(6)
    values[300:320] *= 10.0
    run = profile("back", values)
    assert (run.status, run.failure_mode) == ("unstable", "recovered")


def test_signals_before_the_explosion_give_the_lead():
    findings = [
        {"category": "lr_schedule_jump", "severity": "warning", "step": 280, "message": "LR x20"},
        {"category": "nan_loss", "severity": "critical", "step": 450, "message": ""},
    ]
    spikes = [
        {
            "metric": "train/grad_norm",
            "onset_step": 290,
            "peak_step": 295,
            "detectors": ["robust_z"],
        }
    ]
    run = profile("lead", blow_up(curve(7), 299), findings=findings, spikes=spikes)
    assert [s.kind for s in run.early_signals] == ["lr_schedule_jump", "grad_norm_alarm"]
    assert run.first_signal is not None and run.first_signal.kind == "lr_schedule_jump"
    assert run.lead_steps == 300 - 280


# --- clusters, traits, counterexample ---------------------------------------------------------


def sweep() -> list[RunProfile]:
    """4 stable runs at low LR; 3 high-LR runs blow up to NaN; 2 fp16 runs diverge slowly."""
    base = {"seed": 1, "warmup_steps": 100, "fp16": False, "output_dir": None}
    runs = []
    for i, lr in enumerate((1e-4, 2e-4, 3e-4, 4e-4)):
        runs.append(
            profile(
                f"s{i}", curve(10 + i), {**base, "learning_rate": lr, "output_dir": f"out/s{i}"}
            )
        )
    for i, lr in enumerate((3e-3, 4e-3, 6e-3)):
        values = blow_up(curve(20 + i), 200 + 10 * i, nan_after=260 + 10 * i)
        runs.append(
            profile(f"hot{i}", values, {**base, "learning_rate": lr, "output_dir": f"out/h{i}"})
        )
    for i in range(2):
        finding = {
            "category": "loss_divergence",
            "severity": "critical",
            "step": 500,
            "message": "",
        }
        runs.append(
            profile(
                f"fp16_{i}",
                curve(30 + i),
                {**base, "learning_rate": 2e-4 + i * 1e-4, "fp16": True, "output_dir": f"out/f{i}"},
                findings=[finding],
            )
        )
    return runs


def test_unstable_runs_split_by_how_they_failed_and_stable_runs_stay_out():
    report = cluster_runs(sweep())
    memberships = [set(c.members) for c in report.clusters]
    assert memberships == [{"hot0", "hot1", "hot2"}, {"fp16_0", "fp16_1"}]
    assert all(not name.startswith("s") for c in report.clusters for name in c.members)


def test_each_cluster_is_explained_by_its_own_setting():
    report = cluster_runs(sweep())
    hot, fp16 = report.clusters
    assert (hot.traits[0].field, hot.traits[0].op, hot.traits[0].value) == (
        "learning_rate",
        ">=",
        3e-3,
    )
    assert hot.traits[0].balanced_accuracy == 1.0
    assert (fp16.traits[0].field, fp16.traits[0].op, fp16.traits[0].value) == ("fp16", "==", True)


def test_identifiers_and_constant_fields_are_never_traits():
    fields = setting_fields(sweep())
    assert "output_dir" not in fields
    assert "seed" not in fields and "warmup_steps" not in fields
    assert {"learning_rate", "fp16"} <= set(fields)


def test_the_counterexample_is_the_stable_run_one_setting_away():
    hot = cluster_runs(sweep()).clusters[0]
    counter = hot.counterexample
    assert counter is not None
    assert counter.stable_run == "s3"  # the closest learning rate among stable runs
    assert counter.config_distance == 1
    assert [field for field, _, _ in counter.config_diff] == ["learning_rate"]


def test_the_band_is_aligned_on_the_explosion_and_normalized_by_the_start():
    hot = cluster_runs(sweep()).clusters[0]
    band = hot.band
    assert band is not None
    zero = band.offsets.index(0)
    assert band.median[zero] >= 2.0  # at the explosion: at least twice the start
    before = band.median[: zero - 5]
    assert before and max(before) < 1.0  # the runs were learning before it
    assert all(
        lo <= mid <= hi for lo, mid, hi in zip(band.lower, band.median, band.upper, strict=True)
    )


def test_no_stable_run_means_no_traits_and_a_stated_limit():
    runs = [p for p in sweep() if p.name.startswith("hot")]
    report = cluster_runs(runs)
    assert report.clusters and not report.clusters[0].traits
    assert report.clusters[0].counterexample is None
    assert any("no stable run" in limit for limit in report.limits)


def test_an_all_stable_sweep_has_no_cluster():
    runs = [profile(f"s{i}", curve(40 + i), {"learning_rate": 1e-4 * (i + 1)}) for i in range(5)]
    report = cluster_runs(runs)
    assert report.clusters == []
    assert report.summary["unstable"] == 0


# --- aligned spikes ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_independent_runs_have_no_aligned_spikes(seed):
    """Heavy-tailed noise with random one-step spikes in each run: coincidences are chance."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(10):
        values = curve(1000 * seed + i, steps=2000)
        for step in rng.choice(2000, size=15, replace=False):
            values[step] += 0.4
        runs.append(profile(f"r{i}", values, {"data_seed": i}))
    assert aligned_spikes(runs) == []


def test_spikes_shared_across_runs_are_found_at_their_steps():
    shared = (305, 517, 946)
    runs = []
    for i in range(8):
        values = curve(200 + i, steps=1500)
        for step in shared:
            values[step - 1 + (i % 2)] += 0.35  # off by one step in half the runs
        runs.append(profile(f"r{i}", values, {"data_seed": 1234}))
    events = aligned_spikes(runs)
    assert [(e.first_step, e.last_step) for e in events] == [(305, 306), (517, 518), (946, 947)]
    assert all(len(e.runs) == 8 and e.shared_data_order == "yes" for e in events)


def test_a_shared_spike_in_runs_with_different_data_orders_is_not_blamed_on_data():
    runs = []
    for i in range(6):
        values = curve(300 + i, steps=1000)
        values[600] += 0.5
        runs.append(profile(f"r{i}", values, {"data_seed": i}))
    report = cluster_runs(runs)
    (finding,) = report.findings
    assert finding.category == "data_aligned_spike"
    assert finding.evidence["shared_data_order"] == "no"
    assert "do not share a data order" in finding.message


def test_spikes_after_a_run_blew_up_do_not_count():
    runs = []
    for i in range(6):
        values = blow_up(curve(400 + i, steps=1000), 300)
        values[600] += 100.0  # inside the blow-up: noise of a dead run
        runs.append(profile(f"r{i}", values, {"data_seed": 1}))
    assert aligned_spikes(runs) == []


def test_the_screen_computed_with_the_profile_gives_the_same_aligned_spikes():
    """profile_run computes each run's z-scores in the worker; the report's aligned spikes are
    those of the z-scores computed at the end, run after run, as before."""
    runs = []
    for i in range(8):
        values = curve(500 + i, steps=1500)
        values[[305, 946]] += 0.35
        if i % 3 == 0:
            values = blow_up(values, 1200)  # the screen stops at the explosion
        runs.append(profile(f"r{i}", values, {"data_seed": 7}))
    assert all(run.loss_zscores is not None for run in runs)
    # A reused case's profile leaves them to the report (its worker need not import numba).
    reused = profile_run(
        "r0", "/runs/r0", Case.from_dict({"schema_version": "1"}), runs[0].loss, reused_case=True
    )
    assert reused.loss_zscores is None
    computed_at_the_end = [replace(run, loss_zscores=None) for run in runs]
    events = aligned_spikes(runs)
    assert [(e.first_step, e.last_step) for e in events] == [(306, 306), (947, 947)]
    assert events == aligned_spikes(computed_at_the_end)
