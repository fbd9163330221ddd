"""Weighting mode: the gradient weight the step gives every target token.

With attention silenced (tracer.py) the step's gradient on the embedding row of input token k−1
is g = w · r, where r is the gradient of target k's own cross-entropy alone (weight 1) on an
identical tracer. So

    w = ⟨g, r⟩ / ‖r‖²          the weight (scaled by the number of targets: a token mean is 1.0)
    cos(g, r)                   1 when the step only rescales the token's cross-entropy; below 1
                                when it changes the per-token loss itself (label smoothing, z-loss)

The reference gradients come from one backward of the summed per-target cross-entropy: the rows
are unique and the positions independent, so each row's gradient is its own target's alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tscope.model.xray import TokenWeight
from tscope.xray.probe import Probe
from tscope.xray.tracer import ForwardCall

StepFunction = Callable[[Any, list[dict[str, list[int]]]], Any]


def reference_gradient(model: Any, probe: Probe) -> Any:
    """(vocab, hidden): row k−1's gradient of target k's cross-entropy alone, for every target."""
    import torch

    ids: list[int] = []
    labels: list[int] = []
    for seq in probe.sequences:
        ids.extend(seq["input_ids"])
        labels.extend([-100, *seq["labels"][1:]])  # no target across a sequence boundary
    input_ids = torch.tensor([ids])  # (1, tokens)
    targets = torch.tensor([*labels[1:], -100])  # (tokens,): position t predicts labels[t+1]
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids, use_cache=False).logits[0]  # (tokens, vocab)
    loss = torch.nn.functional.cross_entropy(
        logits.float(), targets, ignore_index=-100, reduction="sum"
    )
    loss.backward()  # type: ignore[no-untyped-call]
    gradient = model.get_input_embeddings().weight.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    return gradient


def token_measures(
    gradient: Any,
    reference: Any,
    probe: Probe,
    calls: Sequence[ForwardCall] = (),
    rank_of_call: Sequence[int] = (),
) -> list[TokenWeight]:
    """Per-target weight and cosine from the step's and the reference embedding gradients."""
    import torch

    first_call: dict[int, int] = {}
    for index, call in enumerate(calls):
        for row in call.token_ids:
            first_call.setdefault(row, index)
    scale = len(probe.targets)
    measures = []
    for target in probe.targets:
        g = gradient[target.row].double()  # (hidden,)
        r = reference[target.row].double()  # (hidden,)
        r_norm = float(r.norm())
        weight = float(torch.dot(g, r)) / (r_norm * r_norm) if r_norm > 0 else float("nan")
        g_norm = float(g.norm())
        cosine = float(torch.dot(g, r)) / (g_norm * r_norm) if g_norm > 0 and r_norm > 0 else 0.0
        seen_in = first_call.get(target.row)
        rank = rank_of_call[seen_in] if seen_in is not None and seen_in < len(rank_of_call) else 0
        measures.append(
            TokenWeight(target.sequence, target.position, weight * scale, cosine, seen_in, rank)
        )
    return measures


def boundary_weight(gradient: Any, reference: Any, probe: Probe) -> float:
    """Gradient on the sequences' last tokens (which predict nothing of their own sequence),
    relative to the median target row's gradient norm: > 0 when a packed step trains a
    sequence's last token to predict the next sequence's first token."""
    import torch

    last = torch.stack([gradient[row] for row in probe.last_rows()]).double().norm(dim=1)
    rows = [t.row for t in probe.targets]
    typical = float(gradient[rows].double().norm(dim=1).median())
    return float(last.max()) / typical if typical > 0 else 0.0


def run_weighting(step: StepFunction, probe: Probe) -> tuple[list[TokenWeight], float, int]:
    """Run the user's step on a weighting tracer: (per-target measures, boundary weight,
    number of forward calls)."""
    from tscope.xray.tracer import CallRecorder, build_tracer, embedding_gradient

    model = build_tracer(probe.vocab_size, "weighting")
    reference = reference_gradient(build_tracer(probe.vocab_size, "weighting"), probe)
    recorder = CallRecorder().attach(model)
    model.zero_grad(set_to_none=True)
    try:
        step(model, probe.copy_sequences())
    finally:
        recorder.detach()
    gradient = embedding_gradient(model)
    measures = token_measures(gradient, reference, probe, recorder.calls)
    return measures, boundary_weight(gradient, reference, probe), len(recorder.calls)
