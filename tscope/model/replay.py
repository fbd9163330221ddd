"""The result of `tscope replay`: re-run optimizer steps from a checkpoint and how well they
reproduce the logged run — the model behind replay.json (CONTRACT.md "replay.json").

Plain frozen dataclasses; `ReplayResult.to_dict()` gives the contract's keys plus documented
extensions, with floats made JSON-safe the same way as case.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tscope.model.case import json_safe

REPLAY_SCHEMA_VERSION = "1"

# StepComparison.status values
COMPARED = "compared"  # both finite: the differences count towards the fidelity maxima
NONFINITE_AGREED = "nonfinite_agreed"  # the replay went non-finite where the log did (or hid it)
MISMATCH_NONFINITE = "nonfinite_mismatch"  # finite on one side only
SKIPPED = "skipped"  # the logged value covers steps that were not replayed


@dataclass(frozen=True)
class ReplayStep:
    """One replayed optimizer step, numbered as the run logged it."""

    step: int
    loss: float  # the step's training loss as the producer computes it (NaN stays NaN)
    grad_norm: float | None  # total L2 norm of the gradient before clipping; None if not computed
    learning_rate: float  # group 0's learning rate used by this step's update
    micro_losses: tuple[float, ...]  # each micro-batch's loss contribution (float32 values)
    per_sample_loss: tuple[float, ...] = ()  # mean over the step's samples = `loss`
    # Per-layer statistics filled by step observers: {layer name: {statistic: value}}.
    layers: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: int = 0  # rows in all micro-batches of the step
    num_items: float | None = None  # the loss normaliser N (tokens counted by the Trainer rule)
    # The step loss had the other Trainer token-count convention been used (diagnostics only).
    alternative_loss: float | None = None
    seconds: float = 0.0
    update_skipped: bool = False  # a what-if skipped this step's update (loss: forward only)
    # Observers' structured records, e.g. {"nonfinite_origin": {phase, module, micro_batch}}.
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepComparison:
    """One logged row against the value the producer would have logged from the replay."""

    step: int  # the logged step (the last step of its logging window)
    window: tuple[int, int]  # first and last optimizer step averaged into the logged loss
    status: str  # COMPARED, NONFINITE_AGREED, MISMATCH_NONFINITE or SKIPPED
    logged_loss: float
    expected_loss: float | None  # what the producer would have logged, computed from the replay
    abs_diff: float | None = None
    rel_diff: float | None = None
    bit_exact: bool = False  # equal to the last bit (after the log's own rounding)
    logged_grad_norm: float | None = None
    grad_norm_rel_diff: float | None = None
    logged_learning_rate: float | None = None
    learning_rate_rel_diff: float | None = None
    note: str = ""


@dataclass(frozen=True)
class MismatchReason:
    """A likely reason the replay does not reproduce the log; `code` is stable, for analyzers."""

    code: str  # e.g. "rng_state_missing", "data_order", "optimizer_state_not_restored"
    message: str


@dataclass(frozen=True)
class Fidelity:
    compared_steps: int
    max_abs_loss_diff: float | None
    max_rel_loss_diff: float | None
    reproduced: bool
    tolerance: float  # relative tolerance `reproduced` was judged with
    bit_exact_steps: int = 0
    max_abs_grad_norm_diff: float | None = None
    max_rel_grad_norm_diff: float | None = None
    grad_norm_reproduced: bool | None = None  # within its own tolerance; None: none logged
    nonfinite_agreed_steps: int = 0
    mismatched_steps: tuple[int, ...] = ()  # logged losses not reproduced
    first_mismatch_step: int | None = None
    logging_window: int = 1  # the longest logging window compared (Trainer logging_steps)
    logged_decimals: int | None = None  # the log rounds losses to this many decimals
    reasons: tuple[MismatchReason, ...] = ()  # only when not reproduced, most likely first


@dataclass(frozen=True)
class RestoreReport:
    """What was restored from the checkpoint, and what the replay had to assume."""

    optimizer: bool
    scheduler: bool
    rng: bool
    scaler: bool
    lr_source: str  # "log", "entry", "scheduler" or "constant"
    loss_path: str  # "model" (the model's own loss), "entry_loss_fn" or "default_causal_lm"
    notes: tuple[str, ...] = ()  # what was done, e.g. "optimizer.pt not loaded: ..."
    caveats: tuple[str, ...] = ()  # limits that can make the replay differ from the run


@dataclass(frozen=True)
class BadSample:
    step: int
    index: int  # row within the step's batch (micro-batches concatenated)
    loss: float
    share: float  # the row's share of the step's gradient or loss excess


@dataclass(frozen=True)
class InterventionOutcome:
    name: str
    params: dict[str, Any]
    peak_loss: float  # highest loss over the window's trained steps in the what-if replay
    spike_removed: bool  # effect == "removed": the baseline spiked and the what-if removes ≥ 80 %
    # Extensions: the numbers behind spike_removed.
    peak_step: int | None = None
    baseline_peak_loss: float | None = None
    baseline_peak_step: int | None = None
    spike_line: float | None = None  # reference median + SPIKE_SIGMA robust sigmas
    reference_median: float | None = None
    checkpoint_step: int | None = None  # the checkpoint the what-if started from
    losses: tuple[tuple[int, float], ...] = ()  # (step, loss) of the what-if over the window
    # Share of the baseline's excess over its pre-spike level that the what-if removes, in [0, 1]
    # (1: back to the pre-spike level or below; 0: as high or higher); None when not judged.
    removed_fraction: float | None = None
    # "removed" (fraction ≥ 0.8), "partial", "kept" (≤ 0.2), "no_spike" (the baseline's peak
    # stays under its own spike line: nothing to remove) or "unjudged" (too little history).
    effect: str = "unjudged"
    # False when the baseline replay does not reproduce the log: the what-if then describes the
    # replayed run, not the logged one, and is no evidence about the run's cause.
    conclusive: bool = True


@dataclass(frozen=True)
class ReplayResult:
    run_name: str
    checkpoint_step: int
    checkpoint_path: str  # relative to the run directory
    checkpoint_format: str
    steps: tuple[int, int]  # first and last optimizer step replayed
    around: int
    window: tuple[int, int]  # requested offsets around `around`, e.g. (-5, 5)
    device: str
    deterministic: bool
    restore: RestoreReport
    per_step: tuple[ReplayStep, ...]
    comparisons: tuple[StepComparison, ...]
    fidelity: Fidelity
    bad_samples: tuple[BadSample, ...] = ()
    interventions: tuple[InterventionOutcome, ...] = ()
    skipped: tuple[str, ...] = ()  # steps of the window that could not be replayed, and why
    seconds: float = 0.0
    tool_version: str = "0"
    # Per attributed step: each sample's loss, gradient norm, share and robust z's.
    sample_attribution: tuple[dict[str, Any], ...] = ()
    skip_suggestion: dict[str, Any] | None = None  # skip_batches.json content and its convention
    cause: str | None = None  # "data" | "state" | None: what the what-if replays showed together

    def to_dict(self) -> dict[str, Any]:
        """The replay.json payload: contract keys plus documented extensions, JSON-safe floats."""
        compared = {c.step: c for c in self.comparisons}
        payload: dict[str, Any] = {
            "schema_version": REPLAY_SCHEMA_VERSION,
            "tool": {"name": "tscope", "version": self.tool_version},
            "run": {"name": self.run_name},
            "checkpoint": {
                "step": self.checkpoint_step,
                "path": self.checkpoint_path,
                "format": self.checkpoint_format,
            },
            "steps": list(self.steps),
            "around": self.around,
            "window": list(self.window),
            "device": self.device,
            "deterministic": self.deterministic,
            "lr_source": self.restore.lr_source,
            "fidelity": _fidelity_dict(self.fidelity),
            "per_step": [_step_dict(s, compared.get(s.step)) for s in self.per_step],
            "comparisons": [_comparison_dict(c) for c in self.comparisons],
            "bad_samples": [
                {"step": b.step, "index": b.index, "loss": b.loss, "share": b.share}
                for b in self.bad_samples
            ],
            "interventions": [
                {
                    "name": i.name,
                    "params": i.params,
                    "peak_loss": i.peak_loss,
                    "spike_removed": i.spike_removed,
                    "peak_step": i.peak_step,
                    "baseline_peak_loss": i.baseline_peak_loss,
                    "baseline_peak_step": i.baseline_peak_step,
                    "spike_line": i.spike_line,
                    "reference_median": i.reference_median,
                    "checkpoint_step": i.checkpoint_step,
                    "losses": [list(pair) for pair in i.losses],
                    "removed_fraction": i.removed_fraction,
                    "effect": i.effect,
                    "conclusive": i.conclusive,
                }
                for i in self.interventions
            ],
            "restore": {
                "optimizer": self.restore.optimizer,
                "scheduler": self.restore.scheduler,
                "rng": self.restore.rng,
                "scaler": self.restore.scaler,
                "lr_source": self.restore.lr_source,
                "loss_path": self.restore.loss_path,
                "notes": list(self.restore.notes),
                "caveats": list(self.restore.caveats),
            },
            "skipped": list(self.skipped),
            "seconds": self.seconds,
            "sample_attribution": list(self.sample_attribution),
            "skip_suggestion": self.skip_suggestion,
            "cause": self.cause,
        }
        result: dict[str, Any] = json_safe(payload)
        return result


def _fidelity_dict(fidelity: Fidelity) -> dict[str, Any]:
    return {
        "compared_steps": fidelity.compared_steps,
        "max_abs_loss_diff": fidelity.max_abs_loss_diff,
        "max_rel_loss_diff": fidelity.max_rel_loss_diff,
        "reproduced": fidelity.reproduced,
        "tolerance": fidelity.tolerance,
        "bit_exact_steps": fidelity.bit_exact_steps,
        "max_abs_grad_norm_diff": fidelity.max_abs_grad_norm_diff,
        "max_rel_grad_norm_diff": fidelity.max_rel_grad_norm_diff,
        "grad_norm_reproduced": fidelity.grad_norm_reproduced,
        "nonfinite_agreed_steps": fidelity.nonfinite_agreed_steps,
        "mismatched_steps": list(fidelity.mismatched_steps),
        "first_mismatch_step": fidelity.first_mismatch_step,
        "logging_window": fidelity.logging_window,
        "logged_decimals": fidelity.logged_decimals,
        "reasons": [{"code": r.code, "message": r.message} for r in fidelity.reasons],
    }


def _step_dict(step: ReplayStep, comparison: StepComparison | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "step": step.step,
        "loss": step.loss,
        "grad_norm": step.grad_norm,
        "learning_rate": step.learning_rate,
        "per_sample_loss": list(step.per_sample_loss),
        "layers": step.layers,
        "samples": step.samples,
        "micro_batches": len(step.micro_losses),
        "seconds": step.seconds,
        "update_skipped": step.update_skipped,
        "extras": step.extras,
    }
    if comparison is not None:
        data["logged_loss"] = comparison.logged_loss
        data["expected_logged_loss"] = comparison.expected_loss
        data["log_window"] = list(comparison.window)
        data["logged_grad_norm"] = comparison.logged_grad_norm
        data["logged_learning_rate"] = comparison.logged_learning_rate
        data["status"] = comparison.status
    return data


def _comparison_dict(comparison: StepComparison) -> dict[str, Any]:
    return {
        "step": comparison.step,
        "window": list(comparison.window),
        "status": comparison.status,
        "logged_loss": comparison.logged_loss,
        "expected_loss": comparison.expected_loss,
        "abs_diff": comparison.abs_diff,
        "rel_diff": comparison.rel_diff,
        "bit_exact": comparison.bit_exact,
        "logged_grad_norm": comparison.logged_grad_norm,
        "grad_norm_rel_diff": comparison.grad_norm_rel_diff,
        "logged_learning_rate": comparison.logged_learning_rate,
        "learning_rate_rel_diff": comparison.learning_rate_rel_diff,
        "note": comparison.note,
    }
