"""Checkpoint explainers on planted layer tables, and controls where nothing may fire."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.synthetic import stable_run
from tscope.analyzers import Evidence, explain
from tscope.model import CheckpointInfo, RunEvent
from tscope.model.checkpoint import (
    LAYER_COLUMNS,
    CheckpointEvidence,
    CheckpointSnapshot,
    ResumeAudit,
)

TENSORS = ["wte.weight", "h.0.attn.weight", "h.0.mlp.weight", "h.1.attn.weight", "ln_f.weight"]
STEPS = [100, 200, 300, 400]
COMPLETE = ResumeAudit(True, True, True, True, None, (0,), 1, None)


def layers_table(ratio=None, norms=None, nonfinite=None, eps=None, deltas=None):
    """Healthy defaults: every tensor moves ~1e-3/step per unit LR, norms grow a few %."""
    rows = []
    for t_index, tensor in enumerate(TENSORS):
        for s_index, step in enumerate(STEPS):
            first = s_index == 0
            r = np.nan if first else (ratio or {}).get((tensor, step), 3e-4 * (1 + 0.1 * t_index))
            norm = (norms or {}).get((tensor, step), 10.0 * (1 + 0.03 * s_index))
            row = dict.fromkeys(LAYER_COLUMNS, np.nan)
            row.update(
                step=step,
                checkpoint=f"checkpoint-{step}",
                tensor=tensor,
                dtype="float32",
                numel=1000,
                l2_norm=norm,
                rms=norm / math.sqrt(1000),
                max_abs=norm / 10,
                nonfinite_count=(nonfinite or {}).get((tensor, step), 0),
                eps_dominance=(eps or {}).get((tensor, step), 0.01),
                update_rms=0.2,
                delta_norm=np.nan if first else (deltas or {}).get((tensor, step), 0.5),
                update_ratio_per_step=r,
                delta_source="weights_fp32",
                log_histogram=[],
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=list(LAYER_COLUMNS))


def snapshots(lr=1e-3, adam_steps=None, audits=None):
    return tuple(
        CheckpointSnapshot(
            info=CheckpointInfo(step, f"checkpoint-{step}", "hf_trainer", True, True),
            audit=(audits or {}).get(step, COMPLETE),
            optimizer_step=(adam_steps or {}).get(step, step),
            param_groups=({"lr": lr, "eps": 1e-8},),
        )
        for step in STEPS
    )


def snapshots_with_lr(lr_at):
    """Complete checkpoints at STEPS whose optimizer holds lr_at(step)."""
    return tuple(
        CheckpointSnapshot(
            info=CheckpointInfo(s, f"checkpoint-{s}", "hf_trainer", True, True),
            audit=COMPLETE,
            optimizer_step=s,
            param_groups=({"lr": lr_at(s)},),
        )
        for s in STEPS
    )


def findings_for(layers, snaps=None, run=None):
    evidence = Evidence(
        run or stable_run(), [], [], CheckpointEvidence(snaps or snapshots(), layers)
    )
    return [f for f in explain(evidence) if f.source == "checkpoints"]


def test_healthy_checkpoints_raise_nothing():
    assert findings_for(layers_table()) == []


# Window 300 has one past window (200): its bound is UPDATE_RATIO_FACTOR_ONE_WINDOW (4×), and
# the tensors' factors here are `factor` / (1 + 0.1 i).
@pytest.mark.parametrize("factor", [6.0, 50.0])
def test_lr_jump_window_shows_as_update_ratio_high_naming_the_layers(factor):
    ratio = {(t, 300): 3e-4 * factor for t in TENSORS}
    found = [
        f for f in findings_for(layers_table(ratio=ratio)) if f.category == "update_ratio_high"
    ]
    assert len(found) == 1 and found[0].evidence["window"] == [200, 300]
    assert set(found[0].evidence["tensors"]) <= set(TENSORS) and found[0].layer in TENSORS


def test_schedule_decay_explains_smaller_updates():
    """An LR 10× lower at later checkpoints with 10× smaller updates is not an anomaly."""
    ratio = {(t, s): 3e-4 * (0.1 if s >= 300 else 1.0) for t in TENSORS for s in STEPS[1:]}
    snaps = snapshots_with_lr(lambda s: 1e-3 if s < 300 else 1e-4)
    ratio[("wte.weight", 300)] = 3e-4 * 0.55  # the window straddling the decay: mean LR 5.5e-4
    assert [
        f.category
        for f in findings_for(layers_table(ratio=ratio), snaps)
        if f.category == "update_ratio_high"
    ] == []


def test_the_window_before_an_lr_jump_is_not_raised_beside_the_windows_after_it():
    """The LR ×20 between checkpoints 200 and 300; every window moved the same per step (Adam
    after a jump: a larger LR, gradients that average out). The first window has no past and
    was judged per unit of LR against the later ones: ×14 "raised", before the jump it is
    the symptom of (a real DeepSpeed ZeRO-3 run, checkpoints every 40 steps)."""
    snaps = snapshots_with_lr(lambda s: 1e-3 if s <= 200 else 2e-2)
    found = findings_for(layers_table(), snaps)
    assert [f for f in found if f.category == "update_ratio_high"] == []


def test_a_window_across_an_lr_jump_is_judged_at_the_raised_rate_and_says_so():
    ratio = {(t, 300): 3e-4 * 10 for t in TENSORS}
    snaps = snapshots_with_lr(lambda s: 1e-3 if s <= 200 else 2e-2)
    (found,) = [
        f
        for f in findings_for(layers_table(ratio=ratio), snaps)
        if f.category == "update_ratio_high"
    ]
    assert found.evidence["window"] == [200, 300]
    assert "jumped ×20 inside this window" in found.message
    # ×10 the movement at up to ×20 the LR: the jump accounts for it, context for the jump
    assert found.severity == "info" and found.evidence["explained_by_lr"]


def test_nonfinite_weights_names_the_first_checkpoint_and_tensor():
    nan = {("h.1.attn.weight", 300): 40, ("h.1.attn.weight", 400): 1000, ("wte.weight", 400): 5}
    found = next(
        f for f in findings_for(layers_table(nonfinite=nan)) if f.category == "nonfinite_weights"
    )
    assert (found.step, found.layer, found.severity) == (300, "h.1.attn.weight", "critical")
    assert found.evidence["last_finite_checkpoint_step"] == 200


def test_optimizer_reset_after_resume_without_optimizer_state():
    run = stable_run()
    run = type(run)(**{**run.__dict__, "events": (RunEvent("resume", 201, "rewind", "x"),)})
    found = findings_for(layers_table(), snapshots(adam_steps={300: 100, 400: 200}), run)
    reset = [f for f in found if f.category == "optimizer_state_reset"]
    assert len(reset) == 1 and reset[0].step == 201 and reset[0].evidence["resume_step"] == 201


def test_frozen_tensor_is_found():
    deltas = {("h.0.mlp.weight", s): 0.0 for s in STEPS[1:]}
    found = [
        f for f in findings_for(layers_table(deltas=deltas)) if f.category == "frozen_parameters"
    ]
    assert found and found[0].evidence["frozen_tensors"] == ["h.0.mlp.weight"]


def test_embedding_norm_runaway():
    norms = {("wte.weight", 400): 30.0}
    found = [
        f for f in findings_for(layers_table(norms=norms)) if f.category == "weight_norm_growth"
    ]
    assert found and found[0].layer == "wte.weight"


def test_epsilon_dominance():
    eps = {("h.1.attn.weight", 400): 0.8}
    found = [
        f for f in findings_for(layers_table(eps=eps)) if f.category == "adam_epsilon_dominance"
    ]
    assert found and found[0].layer == "h.1.attn.weight"


@pytest.mark.parametrize(
    ("dominated_max", "warned"),
    [(1e-8, True), (3e-11, False)],
    ids=["gradient-near-eps", "rounding-level"],
)
def test_epsilon_dominance_of_a_gradient_at_rounding_level_is_no_warning(dominated_max, warned):
    """A parameter whose gradient is zero in exact arithmetic (an attention key bias under
    softmax's shift invariance: healthy OPT and Phi runs of bench/ood block 4) keeps only float
    rounding in v: √v̂ ~1e-11, 1e-8 of the model's typical gradient. Gradients shrunk to ~ε are
    still a warning."""
    layers = layers_table(eps={("h.1.attn.weight", 400): 1.0})
    typical_v = 1e-3**2  # √RMS(v) = 1e-3 for every tensor
    layers["exp_avg_sq_norm"] = typical_v * math.sqrt(1000)
    dominated = (layers["tensor"] == "h.1.attn.weight") & (layers["step"] == 400)
    layers.loc[dominated, "eps_dominated_max"] = dominated_max
    found = [f for f in findings_for(layers) if f.category == "adam_epsilon_dominance"]
    assert bool(found) == warned


def test_incomplete_checkpoint_is_info_unless_resumed_from():
    missing_scheduler = ResumeAudit(True, True, True, False, None, (0,), 1, None)
    snaps = snapshots(audits={200: missing_scheduler})
    info = [f for f in findings_for(layers_table(), snaps) if f.category == "checkpoint_incomplete"]
    assert info and info[0].severity == "info" and "LR scheduler state" in info[0].message
    run = stable_run()
    run = type(run)(**{**run.__dict__, "events": (RunEvent("resume", 201, "rewind", "x"),)})
    warned = [
        f for f in findings_for(layers_table(), snaps, run) if f.category == "checkpoint_incomplete"
    ]
    assert warned[0].severity == "warning" and warned[0].step == 200


def test_a_resume_lacking_only_rng_state_is_context_not_a_warning():
    """Stock nanoGPT saves no RNG state: a resume from its ckpt.pt replays the batch order but
    takes the same updates. On the benchmark's spent splits every such warning sat on a run with
    another cause (weights re-initialised, optimizer or scheduler lost): info, with why."""
    no_rng = ResumeAudit(True, True, True, True, None, (), 1, None)
    snaps = snapshots(audits={200: no_rng})
    run = stable_run()
    run = type(run)(**{**run.__dict__, "events": (RunEvent("resume", 201, "rewind", "x"),)})
    found = [
        f for f in findings_for(layers_table(), snaps, run) if f.category == "checkpoint_incomplete"
    ]
    assert found and found[0].severity == "info" and "RNG state" in found[0].message
    assert "not the updates" in found[0].message
    # the same checkpoint also lacking the scheduler changes the updates after the resume
    no_rng_no_scheduler = ResumeAudit(True, True, True, False, None, (), 1, None)
    snaps = snapshots(audits={200: no_rng_no_scheduler})
    found = [
        f for f in findings_for(layers_table(), snaps, run) if f.category == "checkpoint_incomplete"
    ]
    assert found[0].severity == "warning"
