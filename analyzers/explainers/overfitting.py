"""overfitting: the train loss keeps falling while the eval loss rises from its best."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import ratio_above
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding, Run
from tscope.model.categories import Category
from tscope.model.metric_names import EVAL_LOSS
from tscope.model.visible_text import visible

# The eval loss has risen when each of the last EVAL_RISING_POINTS evaluations is at least this
# much above the best one. Noise argument: an eval loss is computed on a fixed set, so between
# evaluations it moves only with the weights; the largest rise over its best among the healthy
# runs with evaluations (shared/realdata: tinyllama DPO, 29 evals; 70 modded-nanogpt runs) is
# +0.36% (DPO's converged tail). +3% is 8× that.
EVAL_RISE_RATIO = 1.03
EVAL_RISING_POINTS = 2
# Measured (tests/planted_logs.py, scripts/measure_rules.py): warnings on 0 of 82 healthy runs; 0/10
# dev and 0/20 held-out seeds on each control (converged eval ±0.3%, a +1.5% eval rise). Recall
# 10/10 dev and 20/20 held-out on +10% after step 200 and +5% after step 300. Real data: it fires
# on whisper-large-v2-ja (train loss → 0.000 while eval/loss rises 0.321 → 0.420), which
# tscope reported as eval_divergence before.
# A run that declares the metric it selects its model on (trainer_state.json's best_metric: the
# value of metric_for_best_model at best_model_checkpoint) is judged on that metric: when it did
# not get worse (its last EVAL_RISING_POINTS evals are not all EVAL_RISE_RATIO worse than its
# best), a rising eval loss is over-confidence on the eval set, not worse generalization by the
# run's own measure, and the finding is a note. Measured: healthy real logs with a warning
# 1/76 -> 0/76 (whisper-large-v2-ja: eval/loss 0.321 -> 0.420 while eval_wer, its selection
# metric, improved 0.789 -> 0.743 and stayed within 0.2% of that); the planted overfitting runs
# (tests/planted_logs.py) declare no selection metric, their recall is unchanged.
SELECTION_METRIC_KEY = "best_metric"
SELECTION_MATCH_RELATIVE = 1e-9
MIN_EVALS = 4  # a best, something before or after it, and the rising evaluations
# "Keeps falling": the median train loss over the evaluation interval before the last eval is at
# least 1% below the median over the interval before the best eval (the same 1% floor as
# plateau.PLATEAU_MIN_RELATIVE_DROP: below it the train loss has stopped moving).
TRAIN_MIN_RELATIVE_DROP = 0.01
MIN_TRAIN_POINTS_PER_INTERVAL = 1
# "Kept falling" also means the train loss ends near its lowest since the best eval: one that
# rose again (an LR jump's spike it is still recovering from, which also lifts the eval loss) is
# not overfitting. The same 1% floor. The planted overfitting runs and the healthy ones keep
# their verdicts (tests/test_overfitting*.py); it cleared a warning on a planted LR ×30 jump
# printed as MaxText logs (fixtures/data/step_lines/lr_jump/maxtext.log).
# Overfitting is the train loss falling through the eval's rise; one that stepped up right after
# the best eval (the first interval's median this much above the interval before the best) is a
# change of the training data, which moves the model away from the eval's distribution: a
# helper-made healthy accelerate run that switched its training text to Markdown at step 250
# (train 2.54 -> 3.73, then falling) was "overfitting from step 250" with early stopping advised.
# It is judged by eval_divergence instead.
TRAIN_STEP_UP_RELATIVE = 0.05


@dataclass(frozen=True)
class SelectionMetric:
    """The eval series the run selects its model on, and how it ended against its best."""

    name: str
    lower_is_better: bool
    best: float
    best_step: int
    last: float
    tail_best: float  # the best of the last EVAL_RISING_POINTS evals

    @property
    def got_worse(self) -> bool:
        if self.lower_is_better:
            return bool(ratio_above(self.tail_best, self.best, EVAL_RISE_RATIO))
        # Higher is better (accuracy): worse is the best more than the ratio above the tail's.
        return bool(ratio_above(self.best, self.tail_best, EVAL_RISE_RATIO))


@dataclass(frozen=True)
class Overfitting:
    best_step: int
    first_rise_step: int
    best_eval: float
    last_eval: float
    train_at_best: float
    train_at_end: float
    selection: SelectionMetric | None = None

    @property
    def gap_at_best(self) -> float:
        return self.best_eval - self.train_at_best

    @property
    def gap_at_end(self) -> float:
        return self.last_eval - self.train_at_end


def overfitting_onset(run: Run) -> Overfitting | None:
    """The eval loss rose from its best while the train loss kept falling (None otherwise)."""
    loss = primary_loss(run)
    if loss is None or loss == EVAL_LOSS or not run.has(EVAL_LOSS):
        return None
    eval_steps, evals = run.series(EVAL_LOSS)
    finite = np.isfinite(evals)
    eval_steps, evals = eval_steps[finite], evals[finite]
    if evals.size < MIN_EVALS:
        return None
    best = int(np.argmin(evals))
    tail = evals[-EVAL_RISING_POINTS:]
    if best >= evals.size - EVAL_RISING_POINTS or not np.all(
        ratio_above(tail, evals[best], EVAL_RISE_RATIO)
    ):
        return None
    train_steps, train = loss_series(run, loss)
    keep = np.isfinite(train)
    train_steps, train = train_steps[keep], train[keep]

    def interval_median(index: int) -> float | None:
        start = eval_steps[index - 1] if index > 0 else -np.inf
        inside = (train_steps > start) & (train_steps <= eval_steps[index])
        if inside.sum() < MIN_TRAIN_POINTS_PER_INTERVAL:
            return None
        return float(np.median(train[inside]))

    at_best, at_end = interval_median(best), interval_median(evals.size - 1)
    if at_best is None or at_end is None:
        return None
    if at_end > at_best - TRAIN_MIN_RELATIVE_DROP * abs(at_best):
        return None  # the train loss stopped falling (or rose): eval_divergence's case
    since_best = [m for i in range(best + 1, evals.size) if (m := interval_median(i)) is not None]
    if at_end > min(since_best) + TRAIN_MIN_RELATIVE_DROP * abs(at_best):
        return None  # the train loss rose again after the best eval: an incident, not overfitting
    if max(since_best[:1], default=at_best) > (1 + TRAIN_STEP_UP_RELATIVE) * at_best:
        return None  # the eval rise began as the train loss stepped up: the data changed there
    rise = (
        best
        + 1
        + int(np.flatnonzero(ratio_above(evals[best + 1 :], evals[best], EVAL_RISE_RATIO))[0])
    )
    return Overfitting(
        selection=selection_metric(run),
        best_step=int(eval_steps[best]),
        first_rise_step=int(eval_steps[rise]),
        best_eval=float(evals[best]),
        last_eval=float(evals[-1]),
        train_at_best=at_best,
        train_at_end=at_end,
    )


def selection_metric(run: Run) -> SelectionMetric | None:
    """The eval series whose best value is the run's declared best_metric (None if none is)."""
    declared = run.config.get(SELECTION_METRIC_KEY)
    if isinstance(declared, bool) or not isinstance(declared, (int, float)):
        return None
    for name in run.metric_names:
        if name == EVAL_LOSS or not name.startswith("eval"):
            continue
        steps, values = run.series(name)
        keep = np.isfinite(values)
        steps, values = steps[keep], values[keep]
        if values.size < EVAL_RISING_POINTS + 1 or values.min() == values.max():
            continue
        tolerance = SELECTION_MATCH_RELATIVE * max(abs(float(declared)), 1e-12)
        for lower, index in ((True, int(np.argmin(values))), (False, int(np.argmax(values)))):
            if abs(float(values[index]) - float(declared)) <= tolerance:
                tail = values[-EVAL_RISING_POINTS:]
                tail_best = float(tail.min() if lower else tail.max())
                return SelectionMetric(
                    name,
                    lower,
                    float(values[index]),
                    int(steps[index]),
                    float(values[-1]),
                    tail_best,
                )
    return None


class OverfittingExplainer:
    name = "overfitting"
    categories: tuple[str, ...] = ("overfitting",)
    defines = (
        Category(
            "overfitting",
            "symptom",
            "warning",
            "logs",
            "overfitting (train loss falling, eval loss rising)",
            "the train loss keeps falling while the eval loss rises over its best",
            standalone=True,
            symptom_order=80,
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        found = overfitting_onset(evidence.run)
        if found is None:
            return []
        selection = found.selection
        judged_ok = selection is not None and not selection.got_worse
        return [
            Finding(
                category="overfitting",
                severity="info" if judged_ok else "warning",
                confidence=0.75,
                step=found.best_step,
                layer=None,
                message=(
                    f"Overfitting from step {found.best_step}: eval/loss was best there "
                    f"({fmt(found.best_eval)}) and rose to {fmt(found.last_eval)} "
                    f"(×{fmt(found.last_eval / found.best_eval)}; ≥ {EVAL_RISE_RATIO}× the best "
                    f"from step {found.first_rise_step}) while the train loss kept falling "
                    f"({fmt(found.train_at_best)} → {fmt(found.train_at_end)}); the eval − train "
                    f"gap grew from {fmt(found.gap_at_best)} to {fmt(found.gap_at_end)}."
                    + _selection_text(selection)
                ),
                evidence={
                    "best_eval_step": found.best_step,
                    "first_rise_step": found.first_rise_step,
                    "best_eval_loss": found.best_eval,
                    "last_eval_loss": found.last_eval,
                    "train_loss_at_best": found.train_at_best,
                    "train_loss_at_end": found.train_at_end,
                    "gap_at_best": found.gap_at_best,
                    "gap_at_end": found.gap_at_end,
                    "selection_metric": None
                    if selection is None
                    else {
                        "name": selection.name,
                        "lower_is_better": selection.lower_is_better,
                        "best": selection.best,
                        "best_step": selection.best_step,
                        "last": selection.last,
                        "got_worse": selection.got_worse,
                    },
                },
                suggestion=(
                    f"Keep the checkpoint nearest step {found.best_step} (load_best_model_at_end "
                    "with metric_for_best_model='eval_loss'), stop earlier or train fewer epochs, "
                    "and add data or regularization (dropout, weight decay, a lower LR)."
                ),
                threshold=(
                    f"last {EVAL_RISING_POINTS} evals ≥ {EVAL_RISE_RATIO}× the best eval loss and "
                    f"the train loss ≥ {TRAIN_MIN_RELATIVE_DROP:.0%} lower than at the best eval"
                ),
            )
        ]


def _selection_text(selection: SelectionMetric | None) -> str:
    if selection is None:
        return ""
    shown = visible(selection.name)
    if selection.got_worse:
        return (
            f" {shown}, the metric the run selects its model on, got worse too (best "
            f"{fmt(selection.best)} at step {selection.best_step}, {fmt(selection.last)} at the end)."
        )
    return (
        f" But {shown}, the metric the run selects its model on, did not get worse (best "
        f"{fmt(selection.best)} at step {selection.best_step}, {fmt(selection.last)} at the end): "
        "by the run's own measure the model still generalizes; the eval loss rose because the "
        "model grew over-confident on the eval set."
    )
