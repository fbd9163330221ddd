"""A small nanoGPT-style character model in plain torch.

Parameter names follow nanoGPT (`transformer.wte`, `transformer.h.0.attn.c_attn`, `lm_head`, ...)
so that its checkpoints look like the ones a real nanoGPT run leaves behind. Attention is
written out (no fused kernel) so the logits `q·k/√d_head` stay visible to a replay.

    model = TinyGPT(TinyGPTConfig(vocab_size=96))
    logits, loss = model(tokens, targets)   # tokens, targets: (batch, time) int64
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

INIT_STD = 0.02  # GPT-2 / nanoGPT: every weight starts from N(0, 0.02)


@dataclass(frozen=True)
class TinyGPTConfig:
    vocab_size: int  # distinct characters in the corpus (char-level tokens)
    block_size: int = 64  # longest context in tokens; also the training sequence length
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 64  # residual stream width; n_embd / n_head = 16 dims per head
    bias: bool = False  # nanoGPT's default: no biases in Linear or LayerNorm (a bit faster)

    def to_model_args(self) -> dict[str, int | bool]:
        """The `model_args` dict nanoGPT stores in its checkpoints."""
        return dict(asdict(self))


class CausalSelfAttention(nn.Module):
    causal_mask: torch.Tensor  # (block_size, block_size) bool, True where attention is allowed

    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ValueError(f"n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # Lower-triangular mask, not persistent: checkpoints hold only learned parameters.
        causal = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", causal, persistent=False)  # (block, block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, width = x.shape  # (B, T, C)
        head_dim = width // self.n_head
        q, k, v = self.c_attn(x).split(width, dim=2)  # each (B, T, C)
        q = q.view(batch, time, self.n_head, head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(batch, time, self.n_head, head_dim).transpose(1, 2)  # (B, H, T, D)
        v = v.view(batch, time, self.n_head, head_dim).transpose(1, 2)  # (B, H, T, D)
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)  # (B, H, T, T)
        mask = self.causal_mask[:time, :time]  # (T, T)
        logits = logits.masked_fill(~mask, float("-inf"))
        weights = F.softmax(logits, dim=-1)  # (B, H, T, T), rows sum to 1
        y = weights @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(batch, time, width)  # (B, T, C)
        out: torch.Tensor = self.c_proj(y)  # (B, T, C)
        return out


class MLP(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.gelu(self.c_fc(x))  # (B, T, 4C)
        out: torch.Tensor = self.c_proj(hidden)  # (B, T, C)
        return out


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T, C)
        return x


class Trunk(nn.Module):
    """Embeddings, blocks and final norm; an attribute named `transformer`, as in nanoGPT."""

    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # token table (vocab, C)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)  # position table (block, C)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)


class TinyGPT(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = Trunk(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying (Press & Wolf 2017, as in GPT-2): the output head reuses the token table.
        self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        # GPT-2: residual projections get std 0.02/sqrt(2·n_layer) so the residual stream's
        # variance does not grow with depth.
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=INIT_STD / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    def forward(
        self, tokens: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, vocab) and, given targets (B, T), the mean cross-entropy in nats."""
        batch, time = tokens.shape  # (B, T)
        if time > self.config.block_size:
            raise ValueError(
                f"sequence of {time} tokens exceeds block_size {self.config.block_size}"
            )
        positions = torch.arange(time, device=tokens.device)  # (T,)
        x = self.transformer.wte(tokens) + self.transformer.wpe(positions)  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)  # (B, T, C)
        x = self.transformer.ln_f(x)  # (B, T, C)
        logits: torch.Tensor = self.lm_head(x)  # (B, T, vocab)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(batch * time, -1), targets.reshape(batch * time))
        return logits, loss

    def parameter_count(self) -> int:
        """Distinct parameters (the tied head counted once, as nanoGPT reports it)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_iteration(self, tokens_per_iteration: int) -> float:
        """Forward+backward FLOPs (PaLM appendix B: 6·N per token plus attention)."""
        cfg = self.config
        head_dim = cfg.n_embd // cfg.n_head
        attention = 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.block_size
        per_token = 6 * self.parameter_count() + attention
        return float(per_token * tokens_per_iteration)


def optimizer_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
    """nanoGPT's AdamW groups: matrices and embeddings (dim ≥ 2) decay; norms and biases do not.

    Within each group parameters keep `named_parameters()` order, so optimizer state index i maps
    to a name the same way a reader maps a real nanoGPT checkpoint.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decayed = [p for _, p in named if p.dim() >= 2]
    not_decayed = [p for _, p in named if p.dim() < 2]
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": not_decayed, "weight_decay": 0.0},
    ]
