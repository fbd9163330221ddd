"""The tracer: a tiny `LlamaForCausalLM` with random weights in which every probe token has its
own embedding row, so the gradient on that row is the gradient "at the token".

    model = build_tracer(vocab_size=64, mode="weighting")   # attention output zeroed and frozen
    model = build_tracer(vocab_size=64, mode="leak")        # attention live

Weighting mode zeroes every attention block's output projection and freezes the attention
parameters: a position's logits then depend only on its own input embedding (RMSNorm and the
MLP act per position, RoPE only inside the silenced attention), so the gradient on a token's
embedding row is exactly the gradient of the loss terms computed *at* that position. Leak mode
keeps attention live: gradient from one sequence's loss reaching another sequence's rows can only
travel through attention between the two. Built from a config: nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Probe token ids start here: ids 0..TOKEN_ID_OFFSET-1 stay free for the user's pad/bos/eos ids,
# so a step that pads with id 0 never writes into a probe token's row.
TOKEN_ID_OFFSET = 16
TRACER_SEED = 0  # the tracer's random weights; fixed so every run of tscope measures the same
MAX_POSITIONS = 8192  # RoPE table; packing the whole probe batch into one row must fit
MODES = ("weighting", "leak")
# Weights drawn with this std (transformers: 0.02; measured cos with label smoothing 0.1: 0.99999 at 0.02, 0.996 at 0.5) so the tracer's predictions are far from
# uniform: a loss change such as label smoothing, whose gradient term vanishes at uniform
# predictions, then turns the gradient's direction (cos < 1) instead of passing as a rescale.
INITIALIZER_RANGE = 0.5


@dataclass(frozen=True)
class TracerShape:
    """Small enough to run in milliseconds on CPU, big enough that gradients are generic."""

    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4


def tracer_config(vocab_size: int, shape: TracerShape | None = None) -> Any:
    from transformers import LlamaConfig

    shape = shape or TracerShape()
    return LlamaConfig(  # type: ignore[call-arg]
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,  # the input rows must carry only the input-side gradient
        attention_dropout=0.0,
        initializer_range=INITIALIZER_RANGE,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="sdpa",
    )


def build_tracer(vocab_size: int, mode: str, seed: int = TRACER_SEED) -> Any:
    """A fresh tracer in train mode; the same `seed` always gives the same weights."""
    import torch
    from transformers import LlamaForCausalLM

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tracer_config(vocab_size))
    if mode == "weighting":
        for layer in model.model.layers:
            with torch.no_grad():
                layer.self_attn.o_proj.weight.zero_()
            for parameter in layer.self_attn.parameters():
                parameter.requires_grad_(False)
    model.train()
    return model


def embedding_gradient(model: Any) -> torch.Tensor:
    """The input embedding's parameter gradient, (vocab, hidden), zeros when none arrived."""
    import torch

    weight = model.get_input_embeddings().weight
    if weight.grad is None:
        return torch.zeros_like(weight).detach()
    gradient: torch.Tensor = weight.grad.detach().clone()
    return gradient


@dataclass
class ForwardCall:
    """One forward of the tracer: which token ids it saw, and how many labels it scored."""

    token_ids: list[int]
    scored_labels: int | None  # labels != -100 after the causal shift; None when none passed


@dataclass
class CallRecorder:
    """Records every forward of the tracer (the micro-batches the step made), via a pre-hook."""

    calls: list[ForwardCall] = field(default_factory=list)
    handle: Any = None

    def attach(self, model: Any) -> CallRecorder:
        import torch

        def record(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if not torch.is_grad_enabled():
                return  # a no-grad forward (TRL's metrics pass) adds nothing to the gradient
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            if input_ids is None:
                return
            labels = kwargs.get("labels")
            scored = None
            if labels is not None and hasattr(labels, "ne"):
                scored = int(labels[..., 1:].ne(-100).sum())
            self.calls.append(ForwardCall(input_ids.reshape(-1).tolist(), scored))

        self.handle = model.register_forward_pre_hook(record, with_kwargs=True)
        return self

    def detach(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def zero_nonfinite_embedding_grads(model: Any) -> tuple[Any, list[int]]:
    """Leak mode: a micro-batch with no labelled token gives 0/0 = NaN under a mean loss. Such a
    forward carries no gradient by construction, so its NaN output gradient is replaced by zeros
    (counted in the returned list) instead of poisoning every row of the embedding gradient."""
    import torch

    replaced: list[int] = []

    def on_output(_module: Any, _inputs: Any, output: torch.Tensor) -> None:
        if not output.requires_grad:
            return

        def clean(gradient: torch.Tensor) -> torch.Tensor:
            finite = torch.isfinite(gradient)
            if bool(finite.all()):
                return gradient
            replaced.append(int((~finite).sum()))
            return torch.where(finite, gradient, torch.zeros_like(gradient))

        output.register_hook(clean)  # type: ignore[no-untyped-call]

    handle = model.get_input_embeddings().register_forward_hook(on_output)
    return handle, replaced
