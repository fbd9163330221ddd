"""The Trainer producer's models: a tiny GPT-2 or Llama (the benchmark's), or one of the other
transformers families bench/ood's fourth block trains, each built from its config with random
weights (no hub access) and sized by the spec (produce_trainer.py trains them)."""

from __future__ import annotations

from typing import Any

from spec import RunSpec, knob

# bench/ood's fourth block: other model families of transformers, from their configs with random
# weights (no hub access), sized by the spec like GPT-2 and Llama (all the benchmark trains).
FAMILIES = ("gpt_neox", "qwen2", "mistral", "opt", "phi", "bloom", "falcon", "gptj")
MISTRAL_SLIDING_WINDOW = 32  # half the 64-token context: the window is exercised


def build_model(spec: RunSpec, vocab_size: int) -> Any:
    import text_corpus
    import transformers

    if spec.model not in ("gpt2", "llama", *FAMILIES):
        raise ValueError(f"unknown model {spec.model!r}")
    hidden, heads, positions = spec.hidden, spec.heads, text_corpus.BLOCK_TOKENS
    kv_heads = int(knob(spec, "kv_heads")) or heads
    common: dict[str, Any] = {"vocab_size": vocab_size, "bos_token_id": 0, "eos_token_id": 0}
    tie = knob(spec, "tie_word_embeddings")  # None: the family's default
    if tie is not None:
        common["tie_word_embeddings"] = bool(tie)
    llama_like = {
        **common,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": heads,
        "max_position_embeddings": positions,
    }
    if spec.model == "llama":
        config: Any = transformers.LlamaConfig(
            **llama_like, num_key_value_heads=kv_heads, pad_token_id=0
        )
        return transformers.LlamaForCausalLM(config)
    if spec.model in ("qwen2", "mistral"):
        extra = {"sliding_window": MISTRAL_SLIDING_WINDOW} if spec.model == "mistral" else {}
        classes = {
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        }
        config_class, model_class = classes[spec.model]
        config = config_class(**llama_like, num_key_value_heads=kv_heads, pad_token_id=0, **extra)
        return model_class(config)
    if spec.model == "gpt_neox":  # Pythia's: parallel residual, rotary on a quarter of a head
        config = transformers.GPTNeoXConfig(**llama_like, rotary_pct=0.25)
        return transformers.GPTNeoXForCausalLM(config)
    if spec.model == "phi":  # parallel attention/MLP, partial rotary
        config = transformers.PhiConfig(
            **llama_like, partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0
        )
        return transformers.PhiForCausalLM(config)
    if spec.model == "opt":  # learned positions, ReLU
        config = transformers.OPTConfig(
            **common,
            hidden_size=hidden,
            ffn_dim=2 * hidden,
            num_hidden_layers=spec.layers,
            num_attention_heads=heads,
            max_position_embeddings=positions,
            word_embed_proj_dim=hidden,
            pad_token_id=0,
            dropout=0.0,
            attention_dropout=0.0,
        )
        return transformers.OPTForCausalLM(config)
    if spec.model == "bloom":  # ALiBi, no position embedding
        config = transformers.BloomConfig(
            **common, hidden_size=hidden, n_layer=spec.layers, n_head=heads, pad_token_id=0
        )
        return transformers.BloomForCausalLM(config)
    if spec.model == "falcon":  # multi-query attention, parallel attention/MLP
        config = transformers.FalconConfig(
            **common,
            hidden_size=hidden,
            num_hidden_layers=spec.layers,
            num_attention_heads=heads,
            new_decoder_architecture=False,
            multi_query=True,
            parallel_attn=True,
            bias=False,
            max_position_embeddings=positions,
        )
        return transformers.FalconForCausalLM(config)
    if spec.model == "gptj":  # rotary on half of each head, parallel attention/MLP
        config = transformers.GPTJConfig(
            **common,
            n_embd=hidden,
            n_layer=spec.layers,
            n_head=heads,
            n_inner=2 * hidden,
            n_positions=positions,
            rotary_dim=hidden // heads // 2 // 2 * 2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        return transformers.GPTJForCausalLM(config)
    dropout = float(knob(spec, "dropout"))
    config = transformers.GPT2Config(
        **common,
        n_layer=spec.layers,
        n_embd=hidden,
        n_head=heads,
        n_inner=2 * hidden,
        n_positions=positions,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return transformers.GPT2LMHeadModel(config)
