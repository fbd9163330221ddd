"""Bad samples: which rows of a spike step's batch, and of the steps before it, drove the update.

    attribution = SampleAttribution(attribution_steps(around=145), entry, settings)
    # run the replay with observers=[attribution, ...] (first, see below)
    attribution.bad_samples()      # -> (BadSample(step=145, index=2, loss=5.2, share=0.16), ...)
    attribution.results            # per-step summaries for replay.json

At each watched step the observer records every sample's loss (the loop's per-sample losses) and,
at on_backward (gradients accumulated, weights not yet stepped), every sample's gradient norm and
its share of the step's gradient (sample_grads.py); outliers.py decides which samples are bad.
Nothing the replay computes changes: no .grad, weight, optimizer or RNG state is touched, so the
replay stays bit-exact.

Put it first among the observers: hooks that observers register at on_step_start after it are
suspended during its extra forwards, so their statistics count the training step only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tscope.model.replay import BadSample
from tscope.replay.entry import Entry
from tscope.replay.isolation import HookSnapshot, hook_snapshot, rng_snapshot
from tscope.replay.observers import StepContext, StepObserver
from tscope.replay.outliers import (
    BAD_ROWS_MIN_SHARE,
    BAD_SAMPLE_Z,
    LOSS_SUPPORT_Z,
    MIN_ROWS_FOR_RULE,
    OutlierVerdict,
    judge_against_neighbours,
    judge_batch,
)
from tscope.replay.sample_grads import PerSampleGradients, per_sample_gradients
from tscope.replay.sample_losses import LossSpec
from tscope.replay.skip_list import SkipSuggestion, suggest_skips

if TYPE_CHECKING:
    from tscope.replay.loop import LoopSettings

# Steps before the spike step that are examined too. The culprit is often not the peak step's
# batch: the loss logged at step s is batch s under the weights before s's update, so bad rows of
# s show at s, but the update a bad batch causes shows in the losses of s+1, s+2, ... (Adam's first
# moment still carries 0.9^k of it k steps later). Three is a compromise between that reach and
# the cost: per-sample gradients take about two training steps per watched step (measured: 19 ms
# against 10 ms on the fixture model, CPU; 89 ms against 46 ms for a 124M GPT-2 on an H200).
STEPS_BEFORE_SPIKE = 3


def attribution_steps(around: int, before: int = STEPS_BEFORE_SPIKE) -> tuple[int, ...]:
    """The spike step and the `before` steps leading up to it (steps counted from 1)."""
    return tuple(range(max(1, around - before), around + 1))


@dataclass(frozen=True)
class StepAttribution:
    """One watched step: each sample's loss, z scores, gradient norm and share of the gradient."""

    step: int
    losses: tuple[float, ...]  # the loop's per-sample losses; their mean is the step loss
    micro_batch_rows: tuple[int, ...]  # rows of each micro-batch, in training order
    verdict: OutlierVerdict
    grad_norms: tuple[float, ...] = ()  # ‖g_i‖ of loss_i / S; () when not computed
    shares: tuple[float, ...] = ()  # ⟨g_i, G⟩ / ‖G‖², summing to 1
    method: str = ""  # how the per-sample gradients were computed (sample_grads.py)
    sum_rel_diff: float | None = None  # ‖Σ g_i − G‖ / ‖G‖: the per-sample losses are the loop's
    gradients_checked: bool = False  # sum_rel_diff within the tolerance of the step's precision
    seconds: float = 0.0  # per-sample gradients of the step
    notes: tuple[str, ...] = ()

    def bad_samples(self) -> tuple[BadSample, ...]:
        return tuple(
            BadSample(
                step=self.step,
                index=index,
                loss=self.losses[index],
                share=self.shares[index] if self.shares else float("nan"),
            )
            for index in self.verdict.bad
        )

    def to_dict(self) -> dict[str, Any]:
        """A replay.json extension (floats made JSON-safe by the caller's json_safe)."""
        verdict = self.verdict
        return {
            "step": self.step,
            "bad": list(verdict.bad),
            "candidates": list(verdict.candidates),
            "candidate_share": verdict.candidate_share,
            "rule_applied": verdict.applied,
            "whole_batch": verdict.whole_batch,
            "neighbour_loss_z": list(verdict.neighbour_loss_z),
            "neighbour_grad_norm_z": list(verdict.neighbour_grad_norm_z),
            "loss": list(self.losses),
            "loss_z": list(verdict.loss_z),
            "grad_norm": list(self.grad_norms),
            "grad_norm_z": list(verdict.grad_norm_z),
            "share": list(self.shares),
            "micro_batch_rows": list(self.micro_batch_rows),
            "method": self.method,
            "sum_rel_diff": self.sum_rel_diff,
            "gradients_checked": self.gradients_checked,
            "seconds": self.seconds,
            "notes": [verdict.note, *self.notes] if verdict.note else list(self.notes),
        }


class SampleAttribution(StepObserver):
    """Per-sample losses, gradient norms and gradient shares at `steps`; bad samples by the
    outlier rule. `entry` and `settings` are the replay's (the loss path, mixed precision, the
    GradScaler); give them here or through bind() once the replay has restored them."""

    def __init__(
        self,
        steps: Iterable[int],
        entry: Entry | None = None,
        settings: LoopSettings | None = None,
        threshold_z: float = BAD_SAMPLE_Z,
        loss_support_z: float = LOSS_SUPPORT_Z,
        min_share: float = BAD_ROWS_MIN_SHARE,
        min_rows: int = MIN_ROWS_FOR_RULE,
        chunk_bytes: int | None = None,
    ) -> None:
        self.steps = frozenset(steps)
        self.entry = entry
        self.settings = settings
        self.threshold_z = threshold_z
        self.loss_support_z = loss_support_z
        self.min_share = min_share
        self.min_rows = min_rows
        self.chunk_bytes = chunk_bytes
        self._results: list[StepAttribution] = []
        self._hooks: HookSnapshot | None = None
        self._rng: list[Any] = []
        self._gradients: PerSampleGradients | None = None
        self._notes: list[str] = []

    def bind(self, entry: Entry, settings: LoopSettings) -> None:
        self.entry = entry
        self.settings = settings

    def record(self, result: StepAttribution) -> None:
        """A step attributed elsewhere (the ranks of a sharded replay), judged with the rest."""
        self._results.append(result)

    @property
    def results(self) -> tuple[StepAttribution, ...]:
        """Each watched step judged within its batch and against the other watched steps' rows."""
        judged = [r for r in self._results if r.verdict.applied and r.shares]
        scaled = {r.step: _row_gradient_norms(r) for r in judged}
        judged_steps = {r.step for r in judged}
        out = []
        for result in self._results:
            if result.step not in judged_steps:
                out.append(result)
                continue
            neighbours = [r for r in judged if r.step != result.step]
            verdict = judge_against_neighbours(
                result.verdict,
                result.losses,
                scaled[result.step],
                result.shares,
                [loss for r in neighbours for loss in r.losses],
                [norm for r in neighbours for norm in scaled[r.step]],
                threshold_z=self.threshold_z,
                loss_support_z=self.loss_support_z,
                min_share=self.min_share,
                min_rows=self.min_rows,
            )
            out.append(replace(result, verdict=verdict))
        return tuple(out)

    def bad_samples(self) -> tuple[BadSample, ...]:
        return tuple(sample for result in self.results for sample in result.bad_samples())

    def bad_batches(self) -> tuple[int, ...]:
        """Steps whose every row is bad: the batch itself stands out from its neighbours."""
        return tuple(result.step for result in self.results if result.verdict.whole_batch)

    def skip_suggestion(self, batch_index: Callable[[int], int] | None = None) -> SkipSuggestion:
        """Batches (skip_batches.json) and rows to skip on restart. `batch_index` maps a step to
        its loader batch_idx; by default the bound entry file's batch_index(step) when it defines
        one, else the single-epoch convention (skip_list.py)."""
        if batch_index is None:
            batch_index = getattr(self.entry, "batch_index", None)
        rows = {result.step: result.micro_batch_rows for result in self.results}
        return suggest_skips(self.bad_samples(), rows, batch_index)

    def on_step_start(self, context: StepContext) -> None:
        if context.step not in self.steps:
            return
        if self.entry is None or self.settings is None:
            raise RuntimeError(
                "SampleAttribution needs the replay's entry and loop settings: pass them to the "
                "constructor or call bind(entry, settings) before the replay runs"
            )
        device = next(context.model.parameters()).device
        self._hooks = hook_snapshot(context.model)
        self._rng = [rng_snapshot(device)]  # before micro-batch 0's forward
        self._gradients, self._notes = None, []

    def on_micro_batch(self, context: StepContext, index: int, per_sample: Any) -> None:
        if context.step in self.steps and index + 1 < len(context.micro_batches):
            device = next(context.model.parameters()).device
            self._rng.append(rng_snapshot(device))  # before micro-batch index+1's forward

    def on_backward(self, context: StepContext) -> None:
        if context.step not in self.steps:
            return
        assert self.entry is not None and self.settings is not None  # on_step_start checked
        scaler = self.settings.scaler
        spec = LossSpec(
            path=self.settings.loss_path,
            entry=self.entry,
            num_items=context.num_items,
            num_samples=context.num_samples,
            micro_batches=len(context.micro_batches),
            autocast_dtype=self.settings.autocast_dtype,
            grad_scale=float(scaler.get_scale()) if scaler is not None else None,
        )
        try:
            self._gradients = per_sample_gradients(
                context.model,
                context.micro_batches,
                context.per_sample_loss,
                spec,
                hooks_before_step=self._hooks,
                rng_before=self._rng,
                chunk_bytes=self.chunk_bytes,
            )
        except Exception as error:  # an analysis must not end the replay: the step goes unjudged
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            self._notes.append(
                f"per-sample gradients failed ({type(error).__name__}: {first}); no bad samples "
                "can be named at this step"
            )

    def on_step_end(self, context: StepContext) -> None:
        if context.step not in self.steps:
            return
        losses = tuple(
            float(v) for t in context.per_sample_loss for v in t.float().reshape(-1).tolist()
        )
        rows = tuple(int(t.numel()) for t in context.per_sample_loss)
        gradients = self._gradients
        if gradients is not None and len(gradients.shares) != len(losses):
            self._notes.append("the step's gradient is zero: no gradient shares")
            gradients = None
        verdict = judge_batch(
            losses,
            gradients.norms if gradients is not None else None,
            gradients.shares if gradients is not None else None,
            threshold_z=self.threshold_z,
            loss_support_z=self.loss_support_z,
            min_share=self.min_share,
            min_rows=self.min_rows,
        )
        self._results.append(
            StepAttribution(
                step=context.step,
                losses=losses,
                micro_batch_rows=rows,
                verdict=verdict,
                grad_norms=gradients.norms if gradients is not None else (),
                shares=gradients.shares if gradients is not None else (),
                method=gradients.method if gradients is not None else "",
                sum_rel_diff=gradients.sum_rel_diff if gradients is not None else None,
                gradients_checked=gradients.checked if gradients is not None else False,
                seconds=gradients.seconds if gradients is not None else 0.0,
                notes=tuple(self._notes) + (gradients.notes if gradients is not None else ()),
            )
        )
        self._hooks, self._rng, self._gradients, self._notes = None, [], None, []


def _row_gradient_norms(result: StepAttribution) -> tuple[float, ...]:
    """‖∇ loss_i‖: the recorded norms are of loss_i / S (S rows in the step)."""
    rows = len(result.losses)
    return tuple(norm * rows for norm in result.grad_norms)
