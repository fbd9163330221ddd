"""`tscope xray`'s library: measure the weight a training step gives every target token and the
gradient leaking between sequences, on the tracer.

    from tscope.xray import xray_entry, xray_trainer_run
    result = xray_entry("xray_entry.py", lengths=(5, 9, 3, 12, 7, 4))
    result = xray_trainer_run("runs/exp1")          # a Hugging Face Trainer run, no entry

What it cannot see: gradient clipping and the optimizer step (only the gradient the step's
backward leaves is read), and anything that depends on a trained model's state (the tracer has
random weights, so which tokens a real model finds hard plays no part).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tscope.model.xray import XrayResult
from tscope.xray.probe import DEFAULT_LENGTHS, make_probe

# A leak counts when another sequence's rows receive more than this share of the gradient the
# labelled sequence's own rows receive. A masked stack gives exactly 0 (probability 0 ⇒ gradient
# 0); an unmasked tracer leaks ~1e-1; 1e-6 is far above float32 noise on a zero and far below
# any real leak.
LEAK_RELATIVE_THRESHOLD = 1e-6


def xray_entry(entry_path: str | Path, lengths: Sequence[int] = DEFAULT_LENGTHS) -> XrayResult:
    """Audit the entry file's train_step on the probe batch of `lengths`."""
    from tscope.analyzers.xray import fit_rules, matching_rules
    from tscope.xray.entry import call_step, load_xray_entry
    from tscope.xray.leak import run_leak
    from tscope.xray.weighting import run_weighting

    started = time.perf_counter()
    entry = load_xray_entry(entry_path)
    probe = make_probe(lengths)

    def step(model: object, sequences: list[dict[str, list[int]]]) -> None:
        call_step(entry, model, sequences)

    measures, boundary, calls = run_weighting(step, probe)
    leak = run_leak(step, probe)
    notes = []
    if leak.nan_forwards:
        notes.append(
            f"Leak mode: {leak.nan_forwards} gradient value(s) from forwards with no labelled "
            "token were NaN (a mean over zero tokens) and were read as 0."
        )
    result = XrayResult(
        mode="entry",
        source=str(entry_path),
        lengths=tuple(lengths),
        intended=entry.intended,
        tokens=tuple(measures),
        forward_calls=calls,
        world_size=1,
        boundary_weight=boundary,
        leak_matrix=tuple(tuple(row) for row in leak.matrix),
        leak_threshold=LEAK_RELATIVE_THRESHOLD,
        nan_forwards=leak.nan_forwards,
        notes=tuple(notes),
    )
    fits = fit_rules(result.tokens)
    result = replace(result, fits=fits, matched_rules=tuple(matching_rules(fits)))
    return replace(result, seconds=round(time.perf_counter() - started, 3))
