"""Mixture-of-experts routing: each expert's share of the tokens its router sent out this step.

Statistics in context.layers[router module] (e.g. "model.layers.0.mlp.gate"), over every token
of every micro-batch of the step (padding included: the router routes it too):

    expert_share_NNN           assignments to expert NNN / all assignments (tokens × top-k);
                               the shares of a router sum to 1, uniform routing gives 1/E each
    expert_share_max           the largest share
    expert_token_fraction_max  expert_share_max × top-k: the fraction of tokens whose top-k
                               includes the busiest expert (1.0: every token goes there — one
                               expert has taken over, a router collapse)
    router_top_k               k, the experts each token is sent to

Routers are modules named `router` or `gate`, or whose class name ends in "Router" (transformers
5: MixtralTopKRouter, Qwen2MoeTopKRouter, OlmoeTopKRouter, GptOssTopKRouter, DeepseekV3TopkRouter,
...), with a known number of experts E (module, parent block or config: num_experts,
num_local_experts, n_routed_experts). The routed experts are read from the router's output:
its integer expert indices when it returns them (transformers 5 routers return
(logits, weights, indices): exactly what the model routed), else top-k of its (tokens, E) scores
with k from the module, its parent or config.num_experts_per_tok. A router whose output has
neither is noted and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import EXPERT_TOKEN_FRACTION_MAX
from tscope.replay.observers import StepContext
from tscope.replay.stats.base import ObserverOptions, StatisticsObserver
from tscope.replay.stats.structure import config_value, model_config

if TYPE_CHECKING:
    import torch

ROUTER_NAMES = ("router", "gate")
ROUTER_CLASS_SUFFIX = "router"  # compared lower-case: TopKRouter, TopkRouter, Router
EXPERT_COUNT_NAMES = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K_NAMES = ("top_k", "num_experts_per_tok", "num_experts_per_token", "moe_top_k")
SHARE_MAX = "expert_share_max"
TOKEN_FRACTION_MAX = EXPERT_TOKEN_FRACTION_MAX
TOP_K = "router_top_k"


def share_name(expert: int) -> str:
    return f"expert_share_{expert:03d}"


@dataclass(frozen=True)
class Router:
    name: str  # qualified module name
    module: Any  # torch.nn.Module
    experts: int
    top_k: int | None  # None: known only from the indices the router returns


def find_routers(model: torch.nn.Module, config: Any = None) -> list[Router]:
    config = model_config(model, config)
    modules = dict(model.named_modules())
    routers = []
    for name, module in modules.items():
        last = name.rpartition(".")[2]
        if last not in ROUTER_NAMES and not type(module).__name__.lower().endswith(
            ROUTER_CLASS_SUFFIX
        ):
            continue
        parent = modules.get(name.rpartition(".")[0]) if "." in name else model
        experts = _first_int(module, parent, config, EXPERT_COUNT_NAMES)
        if experts is None or experts < 2:
            continue
        weight = getattr(module, "weight", None)
        shape = tuple(getattr(weight, "shape", ()))
        if len(shape) == 2 and shape[0] != experts:  # a gate of something else (gated MLP)
            continue
        routers.append(
            Router(name, module, experts, _first_int(module, parent, config, TOP_K_NAMES))
        )
    return routers


def _first_int(module: Any, parent: Any, config: Any, names: tuple[str, ...]) -> int | None:
    for source in (module, parent):
        for name in names:
            value = getattr(source, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    value = config_value(config, *names)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class RouterShares(StatisticsObserver):
    name = "router"

    @classmethod
    def for_replay(cls, options: ObserverOptions) -> RouterShares:
        return cls(config=options.config)

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.config = config
        self._routers: list[Router] = []
        self._counts: dict[int, torch.Tensor] = {}  # router index -> (E,) int64 assignments
        self._top_k: dict[int, int] = {}
        self._context: StepContext | None = None

    def applies(self, model: torch.nn.Module) -> bool:
        return bool(find_routers(model, self.config))

    def on_step_start(self, context: StepContext) -> None:
        super().on_step_start(context)
        self._context = context
        self._counts, self._top_k = {}, {}
        self._routers = find_routers(context.model, self.config)
        for index, router in enumerate(self._routers):
            self.forward_hook(router.module, partial(self._record, index))

    def _record(self, index: int, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        import torch

        router = self._routers[index]
        with torch.no_grad():
            indices = routed_experts(output, router)
            if indices is None:
                if self._context is not None:
                    self.note(self._context, f"{router.name}: no expert indices or (…, E) scores")
                return
            self._top_k[index] = int(indices.shape[-1]) if indices.dim() else 1
            flat = indices.reshape(-1)
            # Out-of-range indices (a dropped token's sentinel) go to an extra bin, then are cut.
            valid = (flat >= 0) & (flat < router.experts)
            flat = torch.where(valid, flat, router.experts)
            counts = torch.bincount(flat, minlength=router.experts + 1)[: router.experts]
            previous = self._counts.get(index)
            self._counts[index] = counts if previous is None else previous + counts

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        self._context = None
        if not self._counts:
            return
        order = sorted(self._counts)
        counts = torch.stack([self._counts[i].to(self._counts[order[0]].device) for i in order])
        shares = counts.double() / counts.sum(dim=-1, keepdim=True).double()
        self._counts = {}

        def receive(rows: list[list[float]]) -> None:
            for index, row in zip(order, rows, strict=True):
                top_k = self._top_k[index]
                largest = max(row)
                stats = {share_name(e): share for e, share in enumerate(row)}
                stats.update(
                    {SHARE_MAX: largest, TOKEN_FRACTION_MAX: largest * top_k, TOP_K: float(top_k)}
                )
                context.layers.setdefault(self._routers[index].name, {}).update(stats)

        self.deliver(shares, receive)


def routed_experts(output: Any, router: Router) -> torch.Tensor | None:
    """(…, k) int64 expert indices of each token, or None when the output shows none."""
    import torch

    values = output if isinstance(output, (tuple, list)) else (output,)
    tensors = [v for v in values if isinstance(v, torch.Tensor) and v.dim() >= 1]
    for tensor in tensors:
        integer = not tensor.is_floating_point() and tensor.dtype != torch.bool
        if integer and tensor.shape[-1] < router.experts:
            return tensor.long()
    if router.top_k is None:
        return None
    for tensor in tensors:
        if tensor.is_floating_point() and tensor.shape[-1] == router.experts:
            return torch.topk(tensor.detach(), router.top_k, dim=-1).indices
    return None
