"""What checkpoints tell: per-tensor statistics across checkpoints and a resume-readiness audit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tscope.model.case import CheckpointInfo
from tscope.model.run import PartialInput

if TYPE_CHECKING:
    import pandas as pd

# layers.parquet: one row per (checkpoint, tensor). Units and definitions:
#   step                   int    the checkpoint's optimizer step (producer metadata, else its name)
#   checkpoint             str    display path of the checkpoint
#   tensor                 str    parameter name, normalized (no "_orig_mod."/"module." prefixes)
#   dtype, numel           str, int
#   l2_norm, rms, mean, std, min, max, max_abs   float, over finite values, in float64
#   nonfinite_count        int    NaN/Inf elements
#   zero_fraction          float  exactly-zero elements / numel
#   excess_kurtosis        float  E[(x-mean)^4]/std^4 - 3
#   log_histogram          list[int] counts of |x| in LOG_HISTOGRAM_EDGES bins (zeros in bin 0)
#   exp_avg_norm, exp_avg_sq_norm   float  L2 norms of Adam's moments (NaN when absent)
#   adam_step              float  the parameter's Adam step counter (NaN when absent)
#   eps_dominance          float  fraction of the coordinates that ever had a gradient (v > 0)
#                                 with sqrt(v_hat) <= eps
#   never_updated_share    float  fraction of coordinates with v exactly 0: no gradient ever
#                                 (embedding rows of tokens absent from the data)
#   update_rms             float  RMS of m_hat / (sqrt(v_hat) + eps)
#   eps_dominated_max      float  the largest sqrt(v_hat) among the eps-dominated coordinates
#   delta_norm             float  ||W_t - W_prev|| against the previous checkpoint (NaN for the first)
#   update_ratio_per_step  float  delta_norm / ||W_prev|| / steps between the two checkpoints
#   norm_growth_rate       float  (||W_t|| / ||W_prev||) ** (1 / steps) - 1, per step
#   histogram_kl           float  KL(hist_t || hist_prev) of the log-magnitude histograms
#   delta_source           str    "fp32_master" | "weights_fp32" | "weights_bf16" | "weights_fp16"
LAYER_COLUMNS = (
    "step",
    "checkpoint",
    "tensor",
    "dtype",
    "numel",
    "l2_norm",
    "rms",
    "mean",
    "std",
    "min",
    "max",
    "max_abs",
    "nonfinite_count",
    "zero_fraction",
    "excess_kurtosis",
    "log_histogram",
    "exp_avg_norm",
    "exp_avg_sq_norm",
    "adam_step",
    "eps_dominance",
    "never_updated_share",
    "update_rms",
    "eps_dominated_max",
    "delta_norm",
    "update_ratio_per_step",
    "norm_growth_rate",
    "histogram_kl",
    "delta_source",
)


@dataclass(frozen=True)
class ResumeAudit:
    """What a faithful resume from this checkpoint would need, and whether it is there."""

    has_weights: bool
    has_optimizer_moments: bool
    has_step_counters: bool
    has_scheduler: bool
    has_scaler: bool | None  # None: the run shows no sign of fp16 loss scaling
    rng_ranks: tuple[int, ...]  # ranks whose RNG state was saved
    expected_ranks: int | None  # world size when the checkpoint says it
    has_sampler_state: bool | None  # None: the format has no place for it
    notes: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        gaps = []
        if not self.has_weights:
            gaps.append("model weights")
        if not self.has_optimizer_moments:
            gaps.append("optimizer moments (exp_avg, exp_avg_sq)")
        elif not self.has_step_counters:
            gaps.append("optimizer step counters")
        if not self.has_scheduler:
            gaps.append("LR scheduler state")
        if self.has_scaler is False:
            gaps.append("GradScaler state")
        if not self.rng_ranks:
            gaps.append("RNG state")
        elif self.expected_ranks is not None and len(self.rng_ranks) < self.expected_ranks:
            gaps.append(
                f"RNG state for {self.expected_ranks - len(self.rng_ranks)} of {self.expected_ranks} ranks"
            )
        if self.has_sampler_state is False:
            gaps.append("sampler / dataloader position")
        return gaps


@dataclass(frozen=True)
class CheckpointSnapshot:
    """One checkpoint, summarized: what it is, what a resume would find, the optimizer's view."""

    info: CheckpointInfo
    audit: ResumeAudit
    optimizer_step: int | None = None  # the largest Adam step counter in the optimizer state
    param_groups: tuple[dict[str, Any], ...] = ()  # lr, eps, betas, weight_decay (no params lists)
    unmapped_optimizer_state: tuple[str, ...] = ()  # state entries that could not be named, why
    partial: tuple[PartialInput, ...] = ()
    # parameters with per-coordinate state in the optimizer file, named or not (None: unknown)
    optimizer_entries: int | None = None
    # (tensor name, rows) of the token embedding (or the output projection): its rows are the
    # vocabulary size; None when no tensor is named like one
    token_embedding: tuple[str, int] | None = None


@dataclass(frozen=True)
class CheckpointEvidence:
    snapshots: tuple[CheckpointSnapshot, ...] = ()  # in step order
    layers: pd.DataFrame = field(default_factory=lambda: _empty_layers())

    @property
    def steps(self) -> list[int]:
        return [s.info.step for s in self.snapshots if s.info.step is not None]

    def timed_layers(self) -> pd.DataFrame:
        """The layer rows of the checkpoints whose step is known. A checkpoint without one (a
        DCP folder saved by hand as `weights/`) has no place on a step axis: the rules and charts
        that compare checkpoints across steps use these rows; its own rows stay in `layers`
        (layers.parquet, the NaN/Inf rule)."""
        if self.layers.empty:
            return self.layers
        return self.layers[self.layers["step"].notna()]

    def latest_optimizer_entries(self) -> int | None:
        """How many parameters the optimizer of the latest dated checkpoint holds state for."""
        dated = [s for s in self.snapshots if s.info.step is not None]
        return max(dated, key=lambda s: s.info.step or 0).optimizer_entries if dated else None

    def lr_by_step(self) -> dict[int, float]:
        """The learning rate each checkpoint's optimizer state holds (its first param group)."""
        rates = {}
        for snapshot in self.snapshots:
            groups = snapshot.param_groups
            lr = groups[0].get("lr") if groups else None
            if snapshot.info.step is not None and isinstance(lr, (int, float)):
                rates[snapshot.info.step] = float(lr)
        return rates


def _empty_layers() -> pd.DataFrame:
    import pandas as pd  # here: the model is imported by every command, checkpoints or not

    return pd.DataFrame(columns=list(LAYER_COLUMNS))
