"""Write a small real TRL SFTTrainer run for the token-audit tests (one optimizer step).

    python tests/xray_sft_run.py OUT                                   # no packing
    python tests/xray_sft_run.py OUT --packing --padding-free          # BFD packing, padding-free
    python tests/xray_sft_run.py OUT --packing --strategy wrapped      # packing without boundaries

A tiny random Llama trained by `trl.SFTTrainer` on a tokenized dataset for one step and saved:
`checkpoint-1/` holds the run's own training_args.bin (an SFTConfig) and config.json. The
tokenizer is a word-level one built in memory (nothing is downloaded).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--packing", action="store_true")
    parser.add_argument("--padding-free", action="store_true")
    parser.add_argument("--strategy", default="bfd")
    parser.add_argument("--accumulation", type=int, default=2)
    options = parser.parse_args()

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    vocabulary = {f"<w{i}>": i for i in range(48)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab=vocabulary, unk_token="<w0>")),
        pad_token="<w0>",
        eos_token="<w2>",
    )
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
        )
    )  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    rows = [
        torch.randint(3, 48, (int(n),), generator=generator).tolist()
        for n in torch.randint(4, 16, (32,), generator=generator)
    ]
    arguments = SFTConfig(
        output_dir=options.out,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=options.accumulation,
        packing=options.packing,
        packing_strategy=options.strategy,
        padding_free=options.padding_free,
        max_length=64,
        max_steps=1,
        save_strategy="steps",
        save_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
    )
    SFTTrainer(
        model=model,
        args=arguments,
        train_dataset=Dataset.from_list([{"input_ids": row} for row in rows]),
        processing_class=tokenizer,
    ).train()
    assert (Path(options.out) / "checkpoint-1" / "training_args.bin").is_file()


if __name__ == "__main__":
    main()
