"""The largest pre-softmax attention logit of one attention call, computed in bounded memory.

    logit[b, h, i, j] = scaling · q[b, h, i] · k[b, h // groups, j]  (+ an additive mask)

maximised over batch, heads and the (query, key) pairs the mask allows. Query rows are taken in
chunks so at most CHUNK_ELEMENTS float32 scores exist at once (the model's own attention
already materialised or streamed a matrix of the full size, so this adds at most that much).

Masks are turned into additive 0/−inf biases and added to the scores: on CPU an add is ~10×
cheaper than masked_fill on the (B, H, rows, Tk) scores. A logit of +inf at a masked pair
therefore gives NaN (inf − inf) rather than being left out; a run with infinite logits is
reported non-finite anyway.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# 16 Mi float32 scores = 64 MiB per chunk: small next to one batch's activations for any model
# whose attention this is worth measuring, large enough that the fixture models need one chunk.
CHUNK_ELEMENTS = 1 << 24

# Biases reused within a step: the same causal rows for every layer, the same mask tensor for
# every layer of a forward. Keys hold the mask object itself, so an id is never reused.
BiasCache = dict[tuple[Any, ...], "torch.Tensor"]


def max_attention_logit(
    query: torch.Tensor,
    key: torch.Tensor,
    scaling: float,
    mask: Any = None,
    causal: bool = False,
    key_padding: torch.Tensor | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    cache: BiasCache | None = None,
) -> torch.Tensor:
    """0-d float32 tensor on the query's device (NaN when a logit is NaN; −inf if all masked).

    query (B, H, Tq, D); key (B, Hkv, Tk, D) with H a multiple of Hkv (grouped-query attention:
    query head h reads key head h // (H / Hkv), as transformers' repeat_kv lays them out).
    `mask`: None, a bool tensor (True = attend) or an additive float tensor, broadcastable to
    (B, H, Tq, Tk). `causal`: query i sees keys j ≤ i + (Tk − Tq). `key_padding` (B, Tk):
    nonzero = a real token. `cache`: a dict kept for the step, to reuse the masks' biases.
    """
    import torch

    cache = {} if cache is None else cache
    batch, heads, q_len, dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    rows = max(1, chunk_elements // max(1, batch * heads * k_len))
    with torch.no_grad(), torch.autocast(query.device.type, enabled=False):
        keys_t = key.detach().float().transpose(-1, -2)  # (B, Hkv, D, Tk)
        padding = None
        if key_padding is not None:
            keep = key_padding[:, None, None, :k_len].to(torch.bool)  # (B, 1, 1, Tk)
            padding = _bias(keep, query.device)
        best: torch.Tensor | None = None
        for start in range(0, q_len, rows):
            stop = min(q_len, start + rows)
            chunk = query.detach()[:, :, start:stop].float()  # (B, H, c, D)
            chunk = chunk.reshape(batch, kv_heads, groups * (stop - start), dim)
            scores = torch.matmul(chunk, keys_t).mul_(scaling)  # (B, Hkv, groups·c, Tk)
            scores = scores.view(batch, heads, stop - start, k_len)  # (B, H, c, Tk)
            if isinstance(mask, torch.Tensor):
                scores.add_(_mask_rows(mask, start, stop, k_len, cache))
            if causal:
                scores.add_(_causal_rows(start, stop, q_len, k_len, query.device, cache))
            if padding is not None:
                scores.add_(padding)
            largest = scores.amax()
            best = largest if best is None else torch.maximum(best, largest)
    if best is None:
        return torch.tensor(-math.inf, device=query.device)
    return best


def _bias(allowed: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Additive float32 bias: 0 where `allowed`, −inf elsewhere."""
    import torch

    zero = torch.zeros((), device=device)
    return torch.where(allowed, zero, -math.inf)


def _causal_rows(
    start: int, stop: int, q_len: int, k_len: int, device: torch.device, cache: BiasCache
) -> torch.Tensor:
    """(c, Tk) bias of query rows start..stop: key j allowed when j ≤ i + (Tk − Tq)."""
    import torch

    key = ("causal", start, stop, q_len, k_len, device)
    if key not in cache:
        queries = torch.arange(start, stop, device=device)[:, None] + (k_len - q_len)
        keys = torch.arange(k_len, device=device)[None, :]
        cache[key] = _bias(keys <= queries, device)
    return cache[key]


def _mask_rows(
    mask: torch.Tensor, start: int, stop: int, k_len: int, cache: BiasCache
) -> torch.Tensor:
    """The model's mask for query rows start..stop as an additive bias (B|1, H|1, c|1, Tk)."""
    import torch

    key = ("mask", mask, start, stop, k_len)
    cached = cache.get(key)
    if cached is not None:
        return cached
    full = mask
    while full.dim() < 4:
        full = full.unsqueeze(0)
    rows = full if full.shape[-2] == 1 else full[..., start:stop, :]
    rows = rows[..., :k_len]
    bias = _bias(rows, rows.device) if rows.dtype == torch.bool else rows.float()
    cache[key] = bias
    return bias
