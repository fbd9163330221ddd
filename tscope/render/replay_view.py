"""The case's `replay` section turned into the strings the templates print.

    view["replay"] = replay_view(case.replay)   # None when the case has no replay: nothing renders

Read as defensively as the rest of the payload (a case.json from another tscope may lack a key);
every number formatted here, every list ordered here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tscope.model.replay_section import FlaggedSample, ReplayFidelity, ReplaySection, WhatIf
from tscope.render.formatting import MISSING, format_number, format_step, one_line, parse_number
from tscope.render.replay_layers import read_layer_series
from tscope.render.replay_names import (
    FILE_DESCRIPTIONS,
    LOSS_PATHS,
    LR_SOURCES,
    what_if_label,
    what_if_words,
)

SKIP_FILE = "skip_batches.json"
RESTORED_PARTS = (
    ("optimizer", "optimizer state"),
    ("scheduler", "LR scheduler"),
    ("rng", "RNG state"),
    ("scaler", "gradient scaler"),
)
CAUSES = {
    "data": "The what-if replays point at the data (the batches), not the training state.",
    "state": "The what-if replays point at the state (optimizer, learning rate), not the data.",
}
NO_CAUSE = "The what-if replays do not single out data or state."
NOT_CONCLUSIVE = (
    "The what-if replays are not conclusive: the replay does not reproduce the log, so they "
    "describe the replayed run, not the logged one. Fix the entry file first (the reasons above)."
)


EFFECT_WORDS = {
    "removed": "yes",
    "partial": "partly",
    "kept": "no",
    "no_spike": "no spike to remove",
    "unjudged": "not judged",
}
EFFECT_CLASSES = {"removed": "yes", "partial": "partial", "kept": "no"}


def replay_view(section: ReplaySection | None) -> dict[str, Any] | None:
    if section is None:
        return None
    fidelity = section.fidelity
    status = _status(fidelity)
    interventions = section.interventions
    return {
        "status": status,
        "status_label": {
            "reproduced": "reproduces the log",
            "not_reproduced": "does not reproduce the log",
            "unchecked": "not compared with the log",
        }[status],
        "verdict": _verdict(section, fidelity, status),
        "scope": _scope(section),
        "reasons": [f"{one_line(message)} ({code})" for code, message in fidelity.reasons],
        "restore": _restore(section),
        "cause": _cause_line(section.cause, interventions, status),
        "bad_samples": _bad_samples(section.bad_samples),
        "bad_sample_totals": _bad_sample_totals(section.bad_samples),
        "skip_file": SKIP_FILE if SKIP_FILE in section.files else "",
        "what_ifs": [_what_if(item) for item in interventions],
        "layer_rows": _layer_rows(section),
        "files": [
            {"name": name, "description": FILE_DESCRIPTIONS.get(name, "written by the replay")}
            for name in section.files
        ],
        "resume_checks": [
            {
                "checkpoint": check.checkpoint or MISSING,
                "steps": _step_span(check.steps),
                "reproduced": format_number(check.reproduced),
                "max_rel": format_number(parse_number(check.max_rel_loss_diff)),
            }
            for check in section.resume_checks
        ],
    }


def _cause_line(cause: str | None, interventions: Sequence[WhatIf], status: str) -> str:
    if interventions and status == "not_reproduced":
        return NOT_CONCLUSIVE
    if cause:
        return CAUSES.get(cause, f"The what-if replays point at: {cause}.")
    return NO_CAUSE if interventions else ""


def _status(fidelity: ReplayFidelity) -> str:
    if not parse_number(fidelity.compared_steps):
        return "unchecked"
    return "reproduced" if fidelity.reproduced is True else "not_reproduced"


def _verdict(section: ReplaySection, fidelity: ReplayFidelity, status: str) -> str:
    """One line: what was replayed, from where, and whether it reproduces the log."""
    checkpoint = section.checkpoint
    source = checkpoint.path or f"the checkpoint of step {format_step(checkpoint.step)}"
    mode = "deterministic" if section.deterministic else "not deterministic"
    head = (
        f"Replayed {_step_span(section.steps, 'steps ')} from `{one_line(source)}` "
        f"on {one_line(section.device or 'an unknown device')} ({mode})"
    )
    replayed = len(section.per_step)
    compared = format_step(fidelity.compared_steps)
    relative = format_number(parse_number(fidelity.max_rel_loss_diff))
    reasons = fidelity.reasons
    likely = f"; most likely: {one_line(reasons[0][1]).rstrip('.')}" if reasons else ""
    if status == "unchecked":
        return f"{head}: not compared with the log — no logged loss falls on the replayed steps{likely}."
    extras = []
    bit_exact = parse_number(fidelity.bit_exact_steps)
    if bit_exact:
        extras.append(f"{format_step(bit_exact)} bit-exact")
    nonfinite = parse_number(fidelity.nonfinite_agreed_steps)
    if nonfinite:
        extras.append(f"{format_step(nonfinite)} NaN/Inf in both")
    counted = f"{compared} of {replayed} steps compared" + (
        f" ({', '.join(extras)})" if extras else ""
    )
    numbers = f"{counted}, max relative loss difference {relative}" + _tolerance_text(fidelity)
    if fidelity.grad_norm_reproduced is False:
        grad = format_number(parse_number(fidelity.max_rel_grad_norm_diff))
        numbers += f"; the gradient norm differs (max relative difference {grad})"
    if status == "reproduced":
        return f"{head}: reproduces the log — {numbers}."
    first = fidelity.first_mismatch_step
    where = f", first mismatch at step {format_step(first)}" if first is not None else ""
    return f"{head}: does NOT reproduce the log — {numbers}{where}{likely}."


def _tolerance_text(fidelity: ReplayFidelity) -> str:
    """The tolerance, and when the difference exceeds it, why the replay still reproduces: the
    log rounded its losses, and half a unit of the last kept decimal is allowed on top."""
    relative = parse_number(fidelity.max_rel_loss_diff)
    tolerance = parse_number(fidelity.tolerance)
    decimals = parse_number(fidelity.logged_decimals)
    within = relative is not None and tolerance is not None and relative <= tolerance
    if within or decimals is None or fidelity.reproduced is not True:
        return f" (tolerance {format_number(tolerance)})"
    rounding = format_number(0.5 * 10.0 ** -int(decimals))
    return (
        f", above the {format_number(tolerance)} tolerance only by the log's own rounding: it "
        f"keeps {format_step(decimals)} decimals, so each logged loss is ±{rounding} of the "
        "value the run computed"
    )


def _scope(section: ReplaySection) -> str:
    around = parse_number(section.around)
    window = [parse_number(offset) for offset in section.window]
    low, high = window if len(window) == 2 else (None, None)
    if around is None or low is None or high is None:
        return ""
    return (
        f"Asked for: around step {format_step(around)}, window {_signed(low)}…{_signed(high)} "
        f"(steps {format_step(around + low)}–{format_step(around + high)}, shaded in the chart), "
        "the steps the what-ifs change and judge; the steps before the window carry the restored "
        "state up to it."
    )


def _restore(section: ReplaySection) -> dict[str, Any]:
    restore = section.restore
    source = section.checkpoint.path or "the checkpoint"
    restored = ["model weights"] + [words for key, words in RESTORED_PARTS if restore.restored(key)]
    missing = [words for key, words in RESTORED_PARTS if not restore.restored(key)]
    lr_source = restore.lr_source
    loss_path = restore.loss_path
    return {
        "restored": f"Restored from `{one_line(source)}`: {', '.join(restored)}.",
        "not_restored": f"Not restored: {', '.join(missing)}." if missing else "",
        "learning_rate": f"Learning rate: {LR_SOURCES.get(lr_source, lr_source or MISSING)}.",
        "loss": f"Loss: {LOSS_PATHS.get(loss_path, loss_path or MISSING)}.",
        "caveats": [_sentence(one_line(item)) for item in restore.caveats],
        "notes": [one_line(item) for item in restore.notes],
    }


def _sentence(text: str) -> str:
    """A caveat printed as a sentence: the replay records them as clauses, without the stop."""
    return text if not text or text[-1] in ".!?" else f"{text}."


def _bad_samples(flagged: Sequence[FlaggedSample]) -> list[dict[str, str]]:
    samples = sorted(flagged, key=_sample_key)
    return [
        {
            "step": format_step(sample.step),
            "index": format_step(sample.index),
            "loss": format_number(parse_number(sample.loss)),
            "share": _percent(parse_number(sample.share)),
        }
        for sample in samples
    ]


def _bad_sample_totals(flagged: Sequence[FlaggedSample]) -> list[str]:
    """Per step: how many samples were flagged and the gradient share they carry together."""
    by_step: dict[float, list[float | None]] = {}
    for sample in flagged:
        step = parse_number(sample.step)
        if step is not None:
            by_step.setdefault(step, []).append(parse_number(sample.share))
    lines = []
    for step, shares in sorted(by_step.items()):
        known = [share for share in shares if share is not None and math.isfinite(share)]
        together = f", together {_percent(sum(known))} of its gradient" if known else ""
        plural = "s" if len(shares) != 1 else ""
        lines.append(f"Step {format_step(step)}: {len(shares)} flagged sample{plural}{together}.")
    return lines


def _what_if(item: WhatIf) -> dict[str, str]:
    name = item.name
    params = item.params
    judged = parse_number(item.spike_line) is not None
    effect = item.effect or ("removed" if item.spike_removed else "kept")
    fraction = parse_number(item.removed_fraction)
    removed = EFFECT_WORDS.get(effect, effect)
    if fraction is not None and effect != "no_spike":
        removed += f" ({fraction:.0%} of the excess)"
    if item.conclusive is False:
        removed += ", not conclusive"
    return {
        "label": what_if_label(name, params),
        "words": what_if_words(name, params),
        "checkpoint": format_step(item.checkpoint_step),
        "baseline_peak": _peak(item.baseline_peak_loss, item.baseline_peak_step),
        "peak": _peak(item.peak_loss, item.peak_step),
        "spike_line": format_number(parse_number(item.spike_line)),
        "removed": removed if judged else "not judged",
        "removed_class": EFFECT_CLASSES.get(effect, "unknown") if judged else "unknown",
    }


def _layer_rows(section: ReplaySection) -> list[dict[str, str]]:
    """Per statistic: the layer with the largest value, the value and its step."""
    rows = []
    for item in read_layer_series(section.layer_series, section.key_statistics()):
        peaks = [(item.peak(row), name) for row, name in enumerate(item.layers)]
        found = [(peak, name) for peak, name in peaks if peak is not None]
        if not found:
            continue
        (value, column), layer = found[0]  # layers are ranked by this peak already
        rows.append(
            {
                "title": section.statistic(item.name).title,
                "name": item.name,
                "layers": str(len(item.layers)),
                "peak": format_number(value),
                "layer": layer,
                "step": format_step(item.steps[column]),
            }
        )
    return rows


def _peak(loss: float | None, step: int | None) -> str:
    value = format_number(parse_number(loss))
    return f"{value} at step {format_step(step)}" if step is not None else value


def _percent(share: float | None) -> str:
    if share is None or not math.isfinite(share):
        return format_number(share)
    return f"{format_number(share * 100)}%"


def _signed(offset: float) -> str:
    return f"+{format_step(offset)}" if offset > 0 else format_step(offset).replace("-", "−")


def _step_span(steps: Sequence[float | None], prefix: str = "") -> str:
    if len(steps) != 2:
        return MISSING
    return f"{prefix}{format_step(steps[0])}–{format_step(steps[1])}"


def _sample_key(sample: FlaggedSample) -> tuple[float, float]:
    step = parse_number(sample.step)
    index = parse_number(sample.index)
    return (step if step is not None else math.inf, index if index is not None else math.inf)
