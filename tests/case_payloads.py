"""Three representative cases for the renderer tests, built with the real model (Case.to_dict()).

- incident: an LR jump, then a loss spike of 1000x the baseline that lasts 80 steps, NaN gradient
  norms inside it, findings, alternatives, a story, checkpoints, a resume;
- healthy: a smooth run with one info finding and nothing to do;
- partial: inputs that could not be fully read, `<script>` in a metric name, a config value and a
  path, a clipped grad-norm axis (zeros and one outlier), non-finite loss, and a per-layer section.

Series are seeded and bucketed the way the analysis stores chart_series: per bucket the mean value
plus the min and max, so a spike inside a bucket survives.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tscope.model.case import (
    Alternative,
    Case,
    ChangePoint,
    CheckpointInfo,
    Finding,
    Spike,
    StoryEvent,
)
from tscope.model.case_parts import (
    CardCause,
    IncidentCard,
    RestartPoint,
    RunHeader,
    Summary,
)
from tscope.model.run import Caveat, PartialInput, RunEvent, Source

SCRIPT = "<script>alert('x')</script>"


def bucketed(steps: list[int], values: list[float], bucket: int) -> dict[str, list[Any]]:
    """One point per `bucket` steps: first step, mean of the finite values, min and max."""
    series: dict[str, list[Any]] = {"steps": [], "values": [], "min": [], "max": []}
    for start in range(0, len(steps), bucket):
        chunk = values[start : start + bucket]
        finite = [value for value in chunk if math.isfinite(value)]
        nonfinite = [value for value in chunk if not math.isfinite(value)]
        series["steps"].append(steps[start])
        series["values"].append(sum(finite) / len(finite) if finite else nonfinite[0])
        series["min"].append(min(finite) if finite else nonfinite[0])
        series["max"].append(nonfinite[0] if nonfinite else max(finite))
    return series


def _cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def incident_case() -> Case:
    rng = random.Random(7)
    steps = list(range(1200))
    loss = [2.8 + 7.4 * math.exp(-step / 120) + rng.gauss(0, 0.03) for step in steps]
    for step in range(600, 680):  # the long spike: 1000x the baseline for 80 steps
        loss[step] = 2840.0 * (1 + rng.gauss(0, 0.02))
    grad_norm = [0.9 + 4.0 * math.exp(-step / 60) + abs(rng.gauss(0, 0.05)) for step in steps]
    for step in range(598, 680):
        grad_norm[step] = 3.4 + abs(rng.gauss(0, 0.2))
    for step in (640, 641, 642):
        grad_norm[step] = math.nan
    lr = [_cosine_lr(step, 3e-4, 100, 1200) for step in steps]
    for step in range(590, 700):
        lr[step] = lr[step] * 15
    eval_steps = list(range(0, 1200, 100))
    eval_loss = [loss[step] + 0.05 if step != 600 else 2900.0 for step in eval_steps]
    tokens = [51200.0 + rng.gauss(0, 300) for _ in steps]
    spike = Spike(
        id="S1",
        metric="train/loss",
        onset_step=600,
        peak_step=600,
        end_step=680,
        magnitude=94000.0,
        detectors=("spike_score", "robust_z"),
        baseline=2.84,
        peak_value=2893.1,
    )
    findings = [
        Finding(
            category="lr_schedule_jump",
            severity="warning",
            confidence=0.8,
            step=590,
            layer=None,
            message="Learning rate jumped ×15 (2.1e-4 → 3.2e-3) at step 590, 10 steps before "
            "the loss spike.",
            evidence={"lr_before": 0.000213, "lr_after": 0.0032, "ratio": 15.0, "lead_steps": 10},
            suggestion="Restore the scheduler state when resuming; restart from "
            "`runs/gpt-small/checkpoint-500`.",
            spike_id="S1",
            threshold="LR changed >2× in one step outside warmup (schedules move <1 %/step)",
            id="F1",
        ),
        Finding(
            category="loss_spike",
            severity="critical",
            confidence=0.95,
            step=600,
            layer=None,
            message="Loss rose from 2.84 to 2890 (1000×) at step 600 and stayed there 80 steps.",
            evidence={"baseline": 2.84, "peak": 2893.1, "magnitude_sigma": 94000.0, "steps": 80},
            suggestion="Treat steps 600–680 as lost; resume from a checkpoint before 590.",
            spike_id="S1",
            threshold="≥7 robust σ above the rolling median of the previous 1,000 steps (OLMo 2)",
            id="F2",
        ),
        Finding(
            category="grad_norm_spike",
            severity="warning",
            confidence=0.7,
            step=598,
            layer=None,
            message="Gradient norm 3.6× its baseline from step 598; NaN at steps 640–642.",
            evidence={"ratio": 3.6, "nonfinite_steps": [640, 641, 642]},
            suggestion="Clip gradients (max_norm=1.0) if the run does not already.",
            spike_id="S1",
            threshold="≥3× the median of the previous 200 steps",
            id="F3",
        ),
    ]
    story = [
        StoryEvent(590, "learning_rate", "LR ×15 (2.1e-4 → 3.2e-3)", spike_id="S1", lead_steps=10),
        StoryEvent(598, "grad_norm", "grad norm 3.6× baseline", spike_id="S1", lead_steps=2),
        StoryEvent(600, "loss", "loss 2890, 1000× the baseline", spike_id="S1", lead_steps=0),
        StoryEvent(640, "nonfinite", "grad norm NaN for 3 steps", spike_id="S1", lead_steps=-40),
        StoryEvent(680, "loss", "loss back within the baseline band", spike_id="S1"),
        StoryEvent(500, "resume", "run resumed from checkpoint-500"),
    ]
    return Case(
        run=RunHeader(
            name="gpt-small",
            path="runs/gpt-small",
            sources=(
                Source("trainer_state", "checkpoint-1000/trainer_state.json"),
                Source("tensorboard", "logs/events.out.tfevents.1"),
            ),
            first_step=0,
            last_step=1199,
            config={
                "learning_rate": 3e-4,
                "warmup_steps": 100,
                "optimizer": {"name": "adamw", "betas": [0.9, 0.95], "eps": 1e-8},
                "model": {"n_layer": 12, "n_head": 12, "d_model": 768},
            },
        ),
        metrics=[
            "train/loss",
            "train/grad_norm",
            "train/learning_rate",
            "eval/loss",
            "train/tokens_per_second",
        ],
        spikes=[spike],
        change_points=[ChangePoint("train/learning_rate", 590, "pelt", 0.000213, 0.0032)],
        findings=findings,
        story=story,
        checkpoints=[
            CheckpointInfo(500, "runs/gpt-small/checkpoint-500", "hf_trainer", True, True),
            CheckpointInfo(1000, "runs/gpt-small/checkpoint-1000", "hf_trainer", True, False),
        ],
        alternatives=[
            Alternative(
                "bad_batch",
                "one corrupted batch spikes one step; this spike lasts 80 steps",
                "S1",
            ),
            Alternative("loss_scale_collapse", "no loss scale was logged: fp32 or bf16 run", None),
        ],
        limits=["Logs only: no checkpoint statistics, so no per-layer cause."],
        caveats=[
            Caveat(
                "downsampled",
                "The TensorBoard log keeps every 10th step of eval/loss.",
                "logs/events.out.tfevents.1",
            )
        ],
        events=[RunEvent("resume", 500, "resumed from checkpoint-500", "x")],
        summary=Summary(
            verdict="Loss spiked from 2.84 to 2890 (1000×) at step 600 and recovered by step "
            "680; most likely the learning-rate jump ×15 at step 590 (confidence 0.8): the "
            "gradient norm rose 3.6× at step 598, before the loss.",
            next_steps=(
                "Restart from `runs/gpt-small/checkpoint-500` with the scheduler state restored.",
                "Name the samples: `tscope replay runs/gpt-small --around 600 --entry "
                "replay_entry.py`",
            ),
            headline_finding="F1",
            status="incident",
            # The incident card as tscope.analyzers.card.incident_card writes it (its `what`
            # sentence-started by the summary).
            card=IncidentCard(
                what="Loss spiked from 2.84 to 2890 at step 600 and recovered by step 680",
                step=600,
                severity="critical",
                headline_id="F1",
                cause=CardCause(
                    category="lr_schedule_jump",
                    words="a learning-rate schedule jump",
                    finding_id="F1",
                    confidence=0.8,
                ),
                restart=RestartPoint(
                    path="runs/gpt-small/checkpoint-500",
                    step=500,
                    has_optimizer=True,
                    command='trainer.train(resume_from_checkpoint="runs/gpt-small/checkpoint-500")',
                ),
            ),
        ),
        chart_series={
            "train/loss": bucketed(steps, loss, 4),
            "train/grad_norm": bucketed(steps, grad_norm, 4),
            "train/learning_rate": bucketed(steps, lr, 4),
            "eval/loss": bucketed(eval_steps, eval_loss, 1),
            "train/tokens_per_second": bucketed(steps, tokens, 4),
        },
        tool_version="0.1.0",
    )


def healthy_case() -> Case:
    rng = random.Random(11)
    steps = list(range(0, 800, 2))
    loss = [3.1 + 7.3 * math.exp(-step / 90) + rng.gauss(0, 0.02) for step in steps]
    grad_norm = [0.6 + 1.2 * math.exp(-step / 50) + abs(rng.gauss(0, 0.03)) for step in steps]
    lr = [_cosine_lr(step, 6e-4, 40, 800) for step in steps]
    return Case(
        run=RunHeader(
            name="tiny-stable",
            path="runs/tiny-stable",
            sources=(Source("nanogpt_log", "train.log"),),
            first_step=0,
            last_step=798,
            config={"learning_rate": 6e-4, "batch_size": 64, "compile": True},
        ),
        metrics=["train/loss", "train/grad_norm", "train/learning_rate"],
        findings=[
            Finding(
                category="resume_discontinuity",
                severity="info",
                confidence=0.9,
                step=400,
                layer=None,
                message="Run resumed at step 400; the loss continued within 0.5 % of its level.",
                evidence={"loss_before": 3.41, "loss_after": 3.42},
                suggestion="Nothing to do: the resume was benign.",
                id="F1",
            )
        ],
        limits=["Loss logged every 2 steps: a one-step spike could be missed."],
        summary=Summary(
            verdict="No incident: loss fell from 10.4 to 3.12 over 800 steps with no spike, "
            "no divergence and no non-finite value.",
            status="healthy",
        ),
        chart_series={
            "train/loss": bucketed(steps, loss, 1),
            "train/grad_norm": bucketed(steps, grad_norm, 1),
            "train/learning_rate": bucketed(steps, lr, 1),
        },
        tool_version="0.1.0",
    )


def partial_payload() -> dict[str, Any]:
    """A case.json payload (as `tscope report` reads it) with hostile names and a layers section."""
    rng = random.Random(3)
    steps = list(range(300))
    loss = [4.0 - step / 150 + rng.gauss(0, 0.04) for step in steps]
    loss[297:] = [math.nan, math.inf, math.nan]
    grad_norm = [1.0 + abs(rng.gauss(0, 0.1)) for _ in steps]
    grad_norm[100:110] = [0.0] * 10  # skipped steps logged as zero
    grad_norm[200] = 500.0
    odd_metric = f"train/{SCRIPT}"
    odd = [float(step % 7) for step in steps]
    case = Case(
        run=RunHeader(
            name=f"run{SCRIPT}",
            path=f"runs/{SCRIPT}",
            sources=(Source("wandb_export", f"exports/{SCRIPT}.csv"),),
            first_step=0,
            last_step=299,
            config={"note": SCRIPT, "pipe|key": "a|b\nc", "stars": "**bold** _it_ [x](y)"},
        ),
        metrics=["train/loss", "train/grad_norm", odd_metric],
        findings=[
            Finding(
                category="nan_loss",
                severity="critical",
                confidence=1.0,
                step=297,
                layer="model.layers.3.mlp.down_proj",
                message=f"Loss became NaN at step 297 | metric {odd_metric}\nsecond line",
                evidence={"first_nonfinite_step": 297, "value": "nan", "note": SCRIPT},
                suggestion="Resume from the last finite checkpoint and lower the LR.",
                id="F1",
            )
        ],
        partial=[
            PartialInput(f"logs/{SCRIPT}.jsonl", "truncated at byte 4096"),
            PartialInput("logs/events.out.tfevents.2", "CRC mismatch in record 12"),
        ],
        caveats=[Caveat("partial", f"Only 300 steps read {SCRIPT}", "x")],
        summary=Summary(
            verdict="Loss became NaN at step 297; the inputs were only partly readable.",
            next_steps=("Re-export the run: `wandb export --all`",),
            headline_finding="F1",
            status="incident",
        ),
        chart_series={
            "train/loss": bucketed(steps, loss, 1),
            "train/grad_norm": bucketed(steps, grad_norm, 1),
            odd_metric: bucketed(steps, odd, 1),
        },
        tool_version="0.1.0",
    )
    payload = case.to_dict()
    payload["layers"] = _layers_section()
    return payload


def _layers_section() -> dict[str, Any]:
    """12 layers x 6 checkpoints; layer 3's update ratio grows 100x (a log colour scale)."""
    names = [f"model.layers.{index}.mlp.down_proj.weight" for index in range(12)]
    steps = [50, 100, 150, 200, 250, 300]
    update_ratio: list[list[Any]] = []
    norm_growth: list[list[Any]] = []
    for layer in range(12):
        growth = 30.0 if layer == 3 else 1.0
        update_ratio.append([1e-3 * (1 + growth * column / 5) for column in range(6)])
        # A per-step rate, as norm_growth_rate is: layer 11 grows ~×1.3 over its last 50 steps.
        norm_growth.append([1e-4 * layer * column for column in range(6)])
    update_ratio[3][5] = 0.12
    norm_growth[3][5] = "nan"
    norm_growth[7][0] = None  # checkpoint lacked this tensor
    return {
        "steps": steps,
        "names": [*names[:11], f"{SCRIPT}.weight"],
        "update_ratio": update_ratio,
        "norm_growth": norm_growth,
    }
