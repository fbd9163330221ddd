"""Words for the replay section: per-layer statistics, what-if experiments and the files written.

One table per kind of name, so the charts, the HTML and the Markdown call a statistic or an
experiment the same thing. Unknown names (a new what-if) still render. The per-layer statistics'
titles, units and axes are declared once, in tscope.model.replay_statistics.
"""

from __future__ import annotations

from typing import Any

from tscope.model.plain_digits import is_plain_digits
from tscope.render.formatting import format_number, format_step, format_value, parse_number

MAX_CHARTED_STATISTICS = 6

FILE_DESCRIPTIONS = {
    "replay.json": "everything the replay computed: per-step losses and their comparison with "
    "the log, per-layer statistics, per-sample attribution, what-if outcomes",
    "replay_steps.parquet": "one row per replayed step: loss, gradient norm, learning rate, "
    "samples, skipped update, seconds",
    "replay_layers.parquet": "the per-layer statistics as a long table (step, layer, statistic, "
    "value), every layer",
    "replay_samples.parquet": "each sample's loss on each replayed step (step, index in batch, "
    "loss)",
    "skip_batches.json": "the batches to skip on a restart (Lightning SpikeDetection format)",
}

LR_SOURCES = {
    "log": "each step's value from the log",
    "entry": "from the entry file's learning_rate(step)",
    "scheduler": "from the LR scheduler rebuilt from the checkpoint",
    "constant": "constant (no schedule found; see the caveats)",
}
LOSS_PATHS = {
    "model": "the model's own loss",
    "entry_loss_fn": "the entry file's loss_fn",
    "default_causal_lm": "next-token cross-entropy (the model computes no loss)",
}


def what_if_label(name: str, params: dict[str, Any]) -> str:
    """A legend-sized name: "skip 6 samples", "lr ×0.5", "clip 1", "from step 60"."""
    if name == "lr":
        return f"lr ×{_number(params.get('lr_factor'))}"
    if name == "clip":
        return f"clip {_number(params.get('max_grad_norm'))}"
    if name == "from":
        return f"from step {format_step(params.get('from_step'))}"
    if name == "skip":
        samples = params.get("samples")
        if isinstance(samples, dict):
            count = sum(len(rows) for rows in samples.values() if isinstance(rows, list))
            return f"skip {count} sample{'s' if count != 1 else ''}"
        return "skip update"
    return name


def what_if_words(name: str, params: dict[str, Any]) -> str:
    """The experiment in a sentence, e.g. "learning rate ×0.5 on steps 140–150"."""
    steps = _step_range(params.get("steps"))
    if name == "lr":
        return f"learning rate ×{_number(params.get('lr_factor'))}{steps}"
    if name == "clip":
        return f"gradient norm clipped at {_number(params.get('max_grad_norm'))}{steps}"
    if name == "from":
        return (
            f"the window's batches fed to an earlier state (the newest checkpoint at or before "
            f"step {format_step(params.get('from_step'))})"
        )
    if name == "skip":
        samples = params.get("samples")
        if isinstance(samples, dict):
            parts = [
                f"samples {', '.join(str(row) for row in rows)} of step {step}'s batch"
                for step, rows in sorted(samples.items(), key=lambda item: _sort_step(item[0]))
                if isinstance(rows, list)
            ]
            return "drop " + "; ".join(parts) if parts else "drop the flagged samples"
        skipped = params.get("skipped_steps")
        if isinstance(skipped, list) and skipped:
            listed = ", ".join(format_step(step) for step in skipped)
            return f"skip the update of step{'s' if len(skipped) > 1 else ''} {listed}"
        return "skip the spike batch's update"
    shown = f" ({format_value(params)})" if params else ""
    return f"{name}{shown}"


def _step_range(value: Any) -> str:
    if isinstance(value, list) and len(value) == 2:
        return f" on steps {format_step(value[0])}–{format_step(value[1])}"
    return ""


def _number(value: Any) -> str:
    return format_number(parse_number(value))


def _sort_step(step: Any) -> tuple[float, str]:
    number = parse_number(step)
    if number is None and isinstance(step, str) and is_plain_digits(step.lstrip("-")):
        number = float(step)
    return (number if number is not None else float("inf"), str(step))
