"""Write a small real Hugging Face Trainer run for the token-audit tests (one optimizer step).

    python tests/xray_trainer_run.py OUT --accumulation 4                       # one process
    python -m torch.distributed.run --nproc_per_node 2 tests/xray_trainer_run.py OUT \
        --accumulation 2 --no-average-tokens                                    # 2 ranks, gloo

A tiny random GPT-2 trained by `transformers.Trainer` for one step and saved: `checkpoint-1/`
holds the run's own training_args.bin (with distributed_state.num_processes) and config.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--no-average-tokens", action="store_true")
    options = parser.parse_args()

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=32, vocab_size=40)
    )
    generator = torch.Generator().manual_seed(0)
    rows = [
        torch.randint(3, 40, (int(n),), generator=generator).tolist()
        for n in torch.randint(4, 16, (64,), generator=generator)
    ]
    dataset = [{"input_ids": row, "labels": row} for row in rows]

    def collate(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        pad = [longest - len(f["input_ids"]) for f in features]
        return {
            "input_ids": torch.tensor(
                [f["input_ids"] + [0] * p for f, p in zip(features, pad, strict=False)]
            ),
            "attention_mask": torch.tensor(
                [[1] * len(f["input_ids"]) + [0] * p for f, p in zip(features, pad, strict=False)]
            ),
            "labels": torch.tensor(
                [f["labels"] + [-100] * p for f, p in zip(features, pad, strict=False)]
            ),
        }

    arguments = TrainingArguments(
        output_dir=options.out,
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=options.accumulation,
        average_tokens_across_devices=not options.no_average_tokens,
        max_steps=1,
        save_strategy="steps",
        save_steps=1,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=collate).train()
    if int(os.environ.get("RANK", "0")) == 0:
        assert (Path(options.out) / "checkpoint-1" / "training_args.bin").is_file()


if __name__ == "__main__":
    main()
