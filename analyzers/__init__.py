"""Analyzers: pure functions of the run model. Installed as `tscope.analyzers`.

The registries are literal tuples; add a new explainer module to EXPLAINERS here. Its `defines`
declares its finding categories (collected by tscope.analyzers.categories).
"""

from __future__ import annotations

from tscope.analyzers.base import Evidence, Explainer
from tscope.analyzers.explainers.bad_batch_logs import BadBatchLogsExplainer
from tscope.analyzers.explainers.checkpoint_lr import CheckpointLrExplainer
from tscope.analyzers.explainers.divergence import DivergenceExplainer
from tscope.analyzers.explainers.grad_norm import GradNormExplainer
from tscope.analyzers.explainers.layer_logs import LayerLogsExplainer
from tscope.analyzers.explainers.learning_rate import LearningRateExplainer
from tscope.analyzers.explainers.loss_scale import LossScaleExplainer
from tscope.analyzers.explainers.loss_scale_unlogged import UnloggedLossScaleExplainer
from tscope.analyzers.explainers.lr_ramp import LrRampExplainer
from tscope.analyzers.explainers.optimizer_state import OptimizerStateExplainer
from tscope.analyzers.explainers.overfitting import OverfittingExplainer
from tscope.analyzers.explainers.peak_stall import PeakStallExplainer
from tscope.analyzers.explainers.plateau import PlateauExplainer
from tscope.analyzers.explainers.recurring import RecurringSpikesExplainer
from tscope.analyzers.explainers.repeated_data import RepeatedDataExplainer
from tscope.analyzers.explainers.resume import ResumeExplainer
from tscope.analyzers.explainers.routing import RoutingExplainer
from tscope.analyzers.explainers.spikes import SpikeExplainer
from tscope.analyzers.explainers.updates import UpdatesExplainer
from tscope.analyzers.explainers.warmup_stall import WarmupStallExplainer
from tscope.analyzers.explainers.weights import WeightsExplainer
from tscope.model import Finding

EXPLAINERS: tuple[Explainer, ...] = (
    SpikeExplainer(),
    RecurringSpikesExplainer(),
    RepeatedDataExplainer(),
    BadBatchLogsExplainer(),
    DivergenceExplainer(),
    LearningRateExplainer(),
    LrRampExplainer(),
    WarmupStallExplainer(),
    PeakStallExplainer(),
    ResumeExplainer(),
    LossScaleExplainer(),
    UnloggedLossScaleExplainer(),
    GradNormExplainer(),
    PlateauExplainer(),
    OverfittingExplainer(),
    # Per-layer and routing series the run logged (a recorder's, or the user's own):
    LayerLogsExplainer(),
    RoutingExplainer(),
    # From checkpoints (silent when the evidence holds none):
    WeightsExplainer(),
    CheckpointLrExplainer(),
    UpdatesExplainer(),
    OptimizerStateExplainer(),
)


def explain(evidence: Evidence) -> list[Finding]:
    return [finding for explainer in EXPLAINERS for finding in explainer.run(evidence)]


__all__ = ["EXPLAINERS", "Evidence", "explain"]
