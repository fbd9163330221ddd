"""The largest attention logit of each attention layer per step (Wortsman et al. 2023).

Statistic in context.layers[attention module] (e.g. "transformer.h.0.attn",
"model.layers.0.self_attn"):

    attention_logit_max   max over batch, heads and the (query, key) pairs the model attends
                          of the pre-softmax logit scaling · q·k (scaling = the model's own,
                          usually 1/√d_head), in float32, over all micro-batches of the step.
                          Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer
                          training instabilities"): runs whose max logit passed ~1e4 diverged,
                          quality degraded from ~1e3 (ATTENTION_LOGIT_DEGRADED / _DIVERGED).

Where q and k come from:
- Hugging Face models (transformers ≥ 5): every attention layer calls the function registered
  for config._attn_implementation with the final q and k — after rotary embeddings, q/k norms and
  head splitting — and the scaling and mask it uses. During the step that function is wrapped: the
  wrapper calls the original with the same arguments (the replay stays bit-exact) and then
  measures. "eager" is not in the registry: each modeling module's `eager_attention_forward` is
  wrapped instead. Masks: a 4-D mask is applied as the kernel applies it (bool or additive); no
  mask means causal (sdpa's rule); a 2-D mask (flash-attention) masks padded keys. Not applied,
  so the value is an upper bound: flex-attention block masks, flash-attention's sliding windows
  and packed-sequence (cu_seq_lens) boundaries; each is noted once. Softcapping (Gemma 2) is not
  applied (the value is the logit before the cap); attention sinks (gpt-oss) are not logits of a
  key and are left out.
- nanoGPT-style modules (a `c_attn` projection to 3·C and `n_head` on the module or config): the
  c_attn output is split into q, k, v and heads like nanoGPT does; causal, scaling 1/√d_head.
- Anything else is not guessed at: a note says so.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import ATTENTION_LOGIT_MAX, ReplayStatistic
from tscope.replay.isolation import in_extra_pass
from tscope.replay.observers import StepContext
from tscope.replay.stats.attention_max import BiasCache, max_attention_logit
from tscope.replay.stats.base import ObserverOptions, StatisticsObserver, first_tensor, nan_max
from tscope.replay.stats.structure import config_value, model_config

if TYPE_CHECKING:
    import torch

# Wortsman et al. 2023, §3.1: logits above ~1e3 came with degraded loss, above ~1e4 with divergence.
ATTENTION_LOGIT_DEGRADED = 1e3
ATTENTION_LOGIT_DIVERGED = 1e4
EAGER = "eager"
_EAGER_FUNCTION = "eager_attention_forward"  # the name every transformers modeling file uses
_MISSING = object()


class AttentionLogits(StatisticsObserver):
    name = "attention"
    statistics = (
        ReplayStatistic(
            ATTENTION_LOGIT_MAX, "Largest attention logit", "max pre-softmax q·k / √d", False, True
        ),
    )

    @classmethod
    def for_replay(cls, options: ObserverOptions) -> AttentionLogits:
        return cls(config=options.config)

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.config = config  # model config when the model carries none (`model.config` else)
        self._module_names: dict[int, str] = {}  # id(attention module) -> qualified name
        self._records: list[tuple[str, torch.Tensor]] = []
        self._restore: list[Callable[[], None]] = []
        self._active = False  # measure only between on_step_start and on_step_end
        self._via_transformers = False
        self._context: StepContext | None = None
        self._bias_cache: BiasCache = {}  # mask biases shared by the layers of one step

    def on_step_start(self, context: StepContext) -> None:
        super().on_step_start(context)
        self._uninstall()
        self._records = []
        self._bias_cache = {}
        self._context = context
        model = context.model
        implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
        self._via_transformers = isinstance(implementation, str)
        if isinstance(implementation, str):
            self._install_transformers(context, implementation)
        elif not self._hook_nanogpt(context, model_config(model, self.config)):
            self.note(context, "attention layout not recognised; max attention logit not measured")
        self._active = True

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        self._uninstall()
        self._context = None
        self._bias_cache = {}
        if not self._records:
            if self._via_transformers:
                self.note(
                    context,
                    "no attention call went through transformers' attention functions (a "
                    "custom or reordered attention path); not measured",
                )
            return
        records = self._records
        self._records = []

        def receive(values: list[float]) -> None:
            best: dict[str, float] = {}
            for (name, _), value in zip(records, values, strict=True):
                best[name] = nan_max(best.get(name, -math.inf), value)
            for name, value in best.items():
                context.layers.setdefault(name, {})[ATTENTION_LOGIT_MAX] = value

        self.deliver(torch.stack([value for _, value in records]), receive)

    def close(self) -> None:
        super().close()
        self._uninstall()

    # -- Hugging Face: wrap the attention function the layers call -------------------------------

    def _install_transformers(self, context: StepContext, implementation: str) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        model = context.model
        self._module_names = {id(m): name for name, m in model.named_modules()}
        if implementation == EAGER:
            modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
            for module in modules:
                original = getattr(module, _EAGER_FUNCTION, None) if module else None
                if callable(original) and not getattr(original, "_tscope_wrapped", False):
                    setattr(module, _EAGER_FUNCTION, self._wrap(original))
                    self._restore.append(partial(setattr, module, _EAGER_FUNCTION, original))
            return
        if implementation not in ALL_ATTENTION_FUNCTIONS:
            self.note(context, f"attention implementation {implementation!r} is not registered")
            return
        original = ALL_ATTENTION_FUNCTIONS[implementation]
        previous = ALL_ATTENTION_FUNCTIONS._local_mapping.get(implementation, _MISSING)
        ALL_ATTENTION_FUNCTIONS[implementation] = self._wrap(original)

        def restore() -> None:
            if previous is _MISSING:
                ALL_ATTENTION_FUNCTIONS._local_mapping.pop(implementation, None)
            else:
                ALL_ATTENTION_FUNCTIONS[implementation] = previous

        self._restore.append(restore)

    def _uninstall(self) -> None:
        self._active = False
        while self._restore:
            self._restore.pop()()

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def attention(
            module: Any,
            query: Any,
            key: Any,
            value: Any,
            attention_mask: Any,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            result = original(module, query, key, value, attention_mask, *args, **kwargs)
            name = self._module_names.get(id(module))
            # Per-sample gradient passes (tscope.replay.attribution) re-run the forward, under
            # vmap: not the training step, so not measured (module hooks are suspended there).
            if self._active and name is not None and not in_extra_pass():
                if args:  # positional extras: read scaling / is_causal by the original's names
                    bound = signature.bind(
                        module, query, key, value, attention_mask, *args, **kwargs
                    )
                    kwargs = {**bound.arguments, **bound.arguments.get("kwargs", {})}
                self._measure_transformers(name, module, query, key, attention_mask, kwargs)
            return result

        attention._tscope_wrapped = True  # type: ignore[attr-defined]
        return attention

    def _measure_transformers(
        self, name: str, module: Any, query: Any, key: Any, mask: Any, kwargs: dict[str, Any]
    ) -> None:
        import torch

        scaling = kwargs.get("scaling")
        if scaling is None:
            scaling = query.shape[-1] ** -0.5  # what sdpa and the eager functions default to
        is_causal = kwargs.get("is_causal")
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        context = self._context
        assert context is not None  # set for the whole step, and _active only then
        if kwargs.get("cu_seq_lens_q") is not None:
            self.note(context, "packed sequences: document boundaries not applied (upper bound)")
        if kwargs.get("sliding_window") is not None and not isinstance(mask, torch.Tensor):
            self.note(context, "sliding window without a mask tensor not applied (upper bound)")
        padding = None
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:  # flash-attention: (B, Tk) padding
            padding, mask = mask, None
        elif mask is not None and not isinstance(mask, torch.Tensor):
            self.note(context, f"{type(mask).__name__} attention mask not applied (upper bound)")
            mask = None
        causal = bool(is_causal) and mask is None and query.shape[2] > 1
        value = max_attention_logit(
            query, key, float(scaling), mask, causal, padding, cache=self._bias_cache
        )
        self._records.append((name, value))

    # -- nanoGPT: hook the fused q/k/v projection ------------------------------------------------

    def _hook_nanogpt(self, context: StepContext, config: Any) -> bool:
        found = False
        for name, module in context.model.named_modules():
            projection = getattr(module, "c_attn", None)
            heads = getattr(module, "n_head", None) or config_value(config, "n_head")
            if projection is None or not isinstance(heads, int) or heads <= 0:
                continue
            self.forward_hook(projection, partial(self._measure_nanogpt, name, heads))
            found = True
        return found

    def _measure_nanogpt(
        self, name: str, heads: int, module: torch.nn.Module, inputs: Any, output: Any
    ) -> None:
        qkv = first_tensor(output)
        if qkv is None or qkv.dim() != 3 or qkv.shape[-1] % 3 or (qkv.shape[-1] // 3) % heads:
            if self._context is not None:
                self.note(self._context, f"{name}.c_attn output is not (B, T, 3·C); not measured")
            return
        batch, time, width = qkv.shape[0], qkv.shape[1], qkv.shape[-1] // 3
        head_dim = width // heads
        query = qkv[..., :width].view(batch, time, heads, head_dim).transpose(1, 2)  # (B,H,T,D)
        key = qkv[..., width : 2 * width].view(batch, time, heads, head_dim).transpose(1, 2)
        value = max_attention_logit(query, key, head_dim**-0.5, causal=True, cache=self._bias_cache)
        self._records.append((name, value))
