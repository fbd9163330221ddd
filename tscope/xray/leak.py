"""Leak mode: does gradient from one sequence's loss reach another sequence's tokens?

One step per sequence s on a live-attention tracer, with only s labelled (every other label is
-100). The step's embedding gradient on the rows of sequence t, relative to the gradient on s's
own rows, is the leak s → t:

    leak[s][t] = ‖∇ rows(t)‖ / ‖∇ rows(s)‖      0 on a correct stack, exactly: attention masked
                                                 with -inf gives probability 0 and gradient 0
"""

from __future__ import annotations

from dataclasses import dataclass

from tscope.xray.probe import Probe
from tscope.xray.weighting import StepFunction


@dataclass(frozen=True)
class LeakMeasure:
    matrix: list[list[float]]  # (sequences, sequences): row = labelled sequence, column = receiver
    nan_forwards: int  # forwards with no labelled token whose NaN gradient was zeroed


def run_leak(step: StepFunction, probe: Probe) -> LeakMeasure:
    from tscope.xray.tracer import build_tracer, embedding_gradient, zero_nonfinite_embedding_grads

    model = build_tracer(probe.vocab_size, "leak")
    handle, replaced = zero_nonfinite_embedding_grads(model)
    matrix: list[list[float]] = []
    try:
        for labelled in range(len(probe.sequences)):
            model.zero_grad(set_to_none=True)
            step(model, probe.copy_sequences(labelled=labelled))
            matrix.append(leak_row(embedding_gradient(model), probe, labelled))
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
