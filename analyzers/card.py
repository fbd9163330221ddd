"""The incident card: the first screen's facts as fields, so each rendering lays them out alike.

The verdict sentence says the same in prose; the card holds the parts a reader scans for first
(what, when, how bad, the cause, how sure, where to restart) as separate values in case.json.
"""

from __future__ import annotations

from tscope.model import CheckpointInfo, Finding

# Each cause category in the words of an engineer reading the incident ticket; the id stays
# beside it (small) so the finding it names can be found. A category missing here is shown as
# its id with underscores as spaces.
CAUSE_WORDS = {
    "bad_batch": "a bad batch (corrupted or unusual samples)",
    "nonfinite_origin": "a NaN/Inf that started in one layer",
    "lr_schedule_jump": "a learning-rate schedule jump",
    "resume_discontinuity": "a faulty resume from a checkpoint",
    "lr_too_high": "a learning rate too high for this run",
    "loss_scale_collapse": "fp16 loss-scale collapse (overflowing gradients)",
    "warmup_too_short": "a warm-up too short for the peak learning rate",
    "loss_divergence": "the loss diverging",
    "loss_spike": "a loss spike",
    "grad_norm_spike": "a gradient-norm spike",
    "nan_loss": "a NaN/Inf loss",
    "nonfinite_weights": "NaN/Inf in the saved weights",
    "weight_norm_growth": "weight norms growing fast",
    "update_ratio_high": "updates too large for the weights",
    "optimizer_state_reset": "an optimizer state reset at a resume",
    "eval_divergence": "the eval loss diverging from the training loss",
    "overfitting": "overfitting (train loss falling, eval loss rising)",
    "loss_plateau": "a loss that does not move (not learning)",
    "grad_norm_high": "a gradient norm persistently far too high",
    "lr_too_low": "a learning rate too low for this kind of training",
}
# How each checkpoint format is resumed, with the checkpoint path filled in: the line to copy.
RESUME_COMMANDS = {
    "hf_trainer": 'trainer.train(resume_from_checkpoint="{path}")',
    "lightning": 'trainer.fit(model, ckpt_path="{path}")',
}


def cause_words(category: str) -> str:
    return CAUSE_WORDS.get(category, category.replace("_", " "))


def incident_card(
    what: str,
    headline: Finding,
    step: int | None,
    cause: Finding | None,
    cause_category: str,
    confidence: float,
    restart: CheckpointInfo | None,
) -> dict[str, object]:
    """The card's fields; `cause` is the finding behind the explanation (None: inferred)."""
    return {
        "what": what,
        "step": step,
        "severity": headline.severity,
        "headline_id": headline.id,
        "cause": {
            "category": cause_category,
            "words": cause_words(cause_category),
            "finding_id": cause.id if cause is not None else None,
            "confidence": round(confidence, 2),
        },
        "restart": _restart(restart),
    }


def _restart(checkpoint: CheckpointInfo | None) -> dict[str, object] | None:
    if checkpoint is None:
        return None
    template = RESUME_COMMANDS.get(checkpoint.format)
    return {
        "path": checkpoint.path,
        "step": checkpoint.step,
        "has_optimizer": checkpoint.has_optimizer,
        "command": template.format(path=checkpoint.path) if template else None,
    }
