"""The finding categories, defined once: what each means, its role, and how it is worded.

Ranking, the story, the summary, the incident card and docs/case-schema.md all read this table
(tests/test_categories.py checks the docs list every entry and every explainer declares only
registered ids). Adding a category = one explainer file + one entry here.

Roles:
- `cause`: explains an incident (an LR jump, a faulty resume); ranks above the incident's own
  description at equal severity and is credited to an incident it precedes.
- `symptom`: describes an incident (a spike, a divergence). Symptoms of one incident rank in the
  order they are listed here, the most severe description first.
- `context`: everything else (checkpoint statistics, replay and xray notes).

`standalone` conditions are their own news (a plateau, overfitting): when one heads the findings
the first screen describes it rather than an unrelated incident nearby.
"""

from __future__ import annotations

from dataclasses import dataclass

# Most severe first: the one definition every module orders and compares severities by.
SEVERITIES = ("critical", "warning", "info")
# The severities that make a run "not healthy" and that the first screen and the story report.
ALERT_SEVERITIES = ("critical", "warning")
ROLES = ("cause", "symptom", "context")


def severity_rank(severity: str) -> int:
    """0 for the most severe; a lower rank sorts first."""
    return SEVERITIES.index(severity)


def at_least(severity: str, threshold: str) -> bool:
    """Whether `severity` is `threshold` or worse (`--fail-on`)."""
    return severity_rank(severity) <= severity_rank(threshold)


@dataclass(frozen=True)
class Category:
    id: str
    role: str  # one of ROLES
    severity: str  # the usual severity; a rule may lower or raise it with the evidence
    source: str  # where it is produced: logs, checkpoints, replay, cluster, xray
    words: str  # the cause (or the event) in an engineer's words, for the verdict and card
    docs: str  # one line for docs/case-schema.md
    story_signal: str | None = None  # the StoryEvent.signal it adds to an incident's story
    alternative: str = ""  # how "not this cause" reads in alternatives considered
    standalone: bool = False


CATEGORIES: tuple[Category, ...] = (
    # --- causes ------------------------------------------------------------------------------
    Category(
        "bad_batch",
        "cause",
        "warning",
        "replay",
        "a bad batch (corrupted or unusual samples)",
        "samples whose loss or gradient stands out in the replayed steps; from logs, a one-step "
        "loss break above the local trend with a gradient-norm spike in the same step",
        alternative="not a bad batch",
    ),
    Category(
        "repeated_data",
        "cause",
        "warning",
        "logs",
        "the same batches fed again (repeated data)",
        "the loss falls smoothly for several steps at some period p, as on batches seen again, "
        "instead of jumping by the fresh batches' spread",
        alternative="not repeated data",
    ),
    Category(
        "nonfinite_origin",
        "cause",
        "critical",
        "replay",
        "a NaN/Inf that started in one layer",
        "the first module whose output went non-finite in the replay",
    ),
    Category(
        "lr_schedule_jump",
        "cause",
        "warning",
        "logs",
        "a learning-rate schedule jump",
        "the LR jumps between consecutive logged points (a schedule or resume bug)",
        story_signal="learning_rate",
        alternative="not an LR schedule problem",
    ),
    Category(
        "lr_ramp",
        "cause",
        "warning",
        "logs",
        "a learning-rate ramp past the schedule's peak",
        "after its warm-up the LR climbs, point after point, past the peak the warm-up reached "
        "(evidence: start, where it passed 1.25× and 2× the peak, growth per step, the loss's lead)",
        story_signal="learning_rate",
        alternative="not an LR ramp",
    ),
    Category(
        "resume_discontinuity",
        "cause",
        "warning",
        "logs",
        "a faulty resume from a checkpoint",
        "the loss, LR or step counter breaks at a resume point",
        story_signal="resume",
        alternative="not a resume",
    ),
    Category(
        "lr_too_high",
        "cause",
        "warning",
        "logs",
        "a learning rate too high for this run",
        "the loss climbs while the LR is at or near its peak",
        story_signal="learning_rate",
        alternative="not an LR too high",
    ),
    Category(
        "loss_scale_collapse",
        "cause",
        "critical",
        "logs",
        "fp16 loss-scale collapse (overflowing gradients)",
        "the fp16 loss scale collapses (repeated overflows, skipped steps)",
        story_signal="loss_scale",
        alternative="not fp16 overflow",
    ),
    Category(
        "warmup_too_short",
        "cause",
        "warning",
        "logs",
        "a warm-up too short for the peak learning rate",
        "the loss breaks at or just after the end of a short warm-up",
        story_signal="learning_rate",
        alternative="not the warm-up",
    ),
    # --- symptoms, the most severe description of an incident first ------------------------------
    Category(
        "loss_divergence",
        "symptom",
        "critical",
        "logs",
        "the loss diverging",
        "the loss leaves its best level for good",
        alternative="not a divergence",
    ),
    Category(
        "nan_loss",
        "symptom",
        "critical",
        "logs",
        "a NaN/Inf loss",
        "the logged loss becomes NaN/Inf (also when the Trainer hid it)",
    ),
    Category(
        "loss_spike",
        "symptom",
        "warning",
        "logs",
        "a loss spike",
        "the loss rises far above its recent baseline",
    ),
    Category(
        "recurring_loss_spikes",
        "symptom",
        "info",
        "logs",
        "a loss that bumps all the time",
        "many routine loss bumps summarised: count, size against the level before, spacing",
    ),
    Category(
        "grad_norm_spike",
        "symptom",
        "warning",
        "logs",
        "a gradient-norm spike",
        "the gradient norm jumps far above its recent baseline",
    ),
    Category(
        "grad_norm_high",
        "symptom",
        "warning",
        "logs",
        "a gradient norm persistently far too high",
        "the gradient norm's rolling median stays far above its early level or the clip value",
        story_signal="grad_norm",
        standalone=True,
    ),
    Category(
        "eval_divergence",
        "symptom",
        "warning",
        "logs",
        "the eval loss diverging from the training loss",
        "the eval loss rises while the train loss does not keep falling",
    ),
    Category(
        "overfitting",
        "symptom",
        "warning",
        "logs",
        "overfitting (train loss falling, eval loss rising)",
        "the train loss keeps falling while the eval loss rises over its best",
        standalone=True,
    ),
    Category(
        "loss_plateau",
        "symptom",
        "warning",
        "logs",
        "a loss that does not move (not learning)",
        "the loss does not move from the first logged point for half of the log",
        standalone=True,
    ),
    # --- context -------------------------------------------------------------------------------
    Category(
        "lr_too_low",
        "context",
        "warning",
        "logs",
        "a learning rate too low for this kind of training",
        "reserved by the contract, not produced yet",
        standalone=True,
    ),
    Category(
        "nonfinite_weights",
        "context",
        "critical",
        "checkpoints",
        "NaN/Inf in the saved weights",
        "a saved tensor holds NaN/Inf",
    ),
    Category(
        "update_ratio_high",
        "context",
        "warning",
        "checkpoints",
        "updates too large for the weights",
        "the update between checkpoints is large against the weights",
    ),
    Category(
        "weight_norm_growth",
        "context",
        "warning",
        "checkpoints",
        "weight norms growing fast",
        "a layer's weight norm grows fast between checkpoints",
    ),
    Category(
        "adam_epsilon_dominance",
        "context",
        "warning",
        "checkpoints",
        "Adam's ε dominating the second moment",
        "Adam's ε dominates √v for many coordinates",
    ),
    Category(
        "optimizer_state_reset",
        "context",
        "warning",
        "checkpoints",
        "an optimizer state reset at a resume",
        "the optimizer's moments or step count restart between checkpoints",
        alternative="not an optimizer reset",
    ),
    Category(
        "layer_origin",
        "context",
        "info",
        "checkpoints",
        "the layer where an incident started",
        "the layer whose statistics moved first",
    ),
    Category(
        "frozen_parameters",
        "context",
        "info",
        "checkpoints",
        "parameters that never change",
        "parameters identical across checkpoints",
    ),
    Category(
        "checkpoint_incomplete",
        "context",
        "warning",
        "checkpoints",
        "an incomplete checkpoint",
        "a checkpoint misses files or tensors",
    ),
    Category(
        "data_aligned_spike",
        "context",
        "warning",
        "cluster",
        "spikes at the same step in several runs (the data)",
        "a loss spike at the same step in several runs, more often than chance",
        alternative="not data-aligned",
    ),
    Category(
        "attention_logit_growth",
        "context",
        "warning",
        "replay",
        "attention logits growing",
        "max q·k/√d beyond the values of runs that stayed stable",
    ),
    Category(
        "output_logit_divergence",
        "context",
        "warning",
        "replay",
        "output logits drifting",
        "the mean log Z moved far within the replay",
    ),
    Category(
        "activation_outlier",
        "context",
        "warning",
        "replay",
        "an activation outlier",
        "a block's max |activation| far above its replay median",
    ),
    Category(
        "router_collapse",
        "context",
        "warning",
        "replay",
        "an MoE router collapsing onto one expert",
        "one expert takes most of a router's tokens",
    ),
    Category(
        "replay_mismatch",
        "context",
        "warning",
        "replay",
        "a replay that does not reproduce the log",
        "the replayed loss differs from the logged one",
    ),
    Category(
        "intervention_effect",
        "context",
        "info",
        "replay",
        "a what-if experiment's effect",
        "what a replay what-if changed",
    ),
    Category(
        "token_weighting_mismatch",
        "context",
        "warning",
        "xray",
        "tokens weighted unlike the intended rule",
        "a token's gradient weight differs from the intended rule",
    ),
    Category(
        "cross_sequence_leak",
        "context",
        "critical",
        "xray",
        "gradient leaking across sequences",
        "one sequence's loss reaches another's tokens",
    ),
)

_BY_ID = {category.id: category for category in CATEGORIES}
CAUSES = tuple(c.id for c in CATEGORIES if c.role == "cause")
SYMPTOMS = tuple(c.id for c in CATEGORIES if c.role == "symptom")
STANDALONE = tuple(c.id for c in CATEGORIES if c.standalone)


def category(category_id: str) -> Category | None:
    return _BY_ID.get(category_id)


def is_cause(category_id: str) -> bool:
    entry = _BY_ID.get(category_id)
    return entry is not None and entry.role == "cause"


def words(category_id: str) -> str:
    """The category in words; an unregistered id reads as itself with spaces."""
    entry = _BY_ID.get(category_id)
    return entry.words if entry is not None else category_id.replace("_", " ")


def story_signal(category_id: str) -> str | None:
    entry = _BY_ID.get(category_id)
    return entry.story_signal if entry is not None else None


def ranking_role(category_id: str) -> int:
    """0 for causes, then symptoms in registry order, then everything else."""
    entry = _BY_ID.get(category_id)
    if entry is not None and entry.role == "cause":
        return 0
    if category_id in SYMPTOMS:
        return 1 + SYMPTOMS.index(category_id)
    return 1 + len(SYMPTOMS)
