"""Leak mode: does gradient from one sequence's loss reach another sequence's tokens?

One step per sequence s on a live-attention tracer, with only s labelled (every other label is
-100). The step's embedding gradient on the rows of sequence t, relative to the gradient on s's
own rows, is the leak s → t:

    leak[s][t] = ‖∇ rows(t)‖ / ‖∇ rows(s)‖      0 on a correct stack, exactly: attention masked
                                                 with -inf gives probability 0 and gradient 0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tscope.xray.probe import Probe
from tscope.xray.weighting import StepFunction

# (tracer, sequences) -> the input embedding's gradient the step produced
GradientFunction = Callable[[Any, list[dict[str, list[int]]]], Any]


@dataclass(frozen=True)
class LeakMeasure:
    matrix: list[list[float]]  # (sequences, sequences): row = labelled sequence, column = receiver
    nan_forwards: int  # forwards with no labelled token whose NaN gradient was zeroed


def run_leak(step: StepFunction, probe: Probe) -> LeakMeasure:
    """Leak mode for a step that leaves its gradient on the model (an entry's train_step)."""
    from tscope.xray.tracer import embedding_gradient

    def gradient_of(model: Any, sequences: list[dict[str, list[int]]]) -> Any:
        step(model, sequences)
        return embedding_gradient(model)

    return run_leak_with(gradient_of, probe)


def run_leak_with(gradient_of: GradientFunction, probe: Probe) -> LeakMeasure:
    """Leak mode for a step that returns the embedding gradient it made (the Trainer's step,
    read before the optimizer, which zeroes the gradients after)."""
    from tscope.xray.tracer import build_tracer, zero_nonfinite_embedding_grads

    model = build_tracer(probe.vocab_size, "leak")
    handle, replaced = zero_nonfinite_embedding_grads(model)
    matrix: list[list[float]] = []
    try:
        for labelled in range(len(probe.sequences)):
            model.zero_grad(set_to_none=True)
            gradient = gradient_of(model, probe.copy_sequences(labelled=labelled))
            matrix.append(leak_row(gradient, probe, labelled))
    finally:
        handle.remove()
    return LeakMeasure(matrix, len(replaced))


def leak_row(gradient: object, probe: Probe, labelled: int) -> list[float]:
    """‖∇ rows(t)‖ / ‖∇ rows(labelled)‖ for every sequence t (1.0 on the diagonal)."""
    import torch

    assert isinstance(gradient, torch.Tensor)
    norms = [
        float(gradient[probe.rows_of(index)].double().norm())
        for index in range(len(probe.sequences))
    ]
    own = norms[labelled]
    if own <= 0:
        return [0.0 for _ in norms]
    return [norm / own for norm in norms]
