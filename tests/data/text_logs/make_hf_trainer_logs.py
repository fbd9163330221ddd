"""Regenerate the two Hugging Face Trainer stdout fixtures with the real Trainer (CPU, seconds).

    PYTHONUNBUFFERED=1 python make_hf_trainer_logs.py tqdm > hf_trainer_tqdm.log 2>&1
    python make_hf_trainer_logs.py printer > hf_trainer_printer.log 2>&1

A one-layer GPT-2 with a 32-token vocabulary trains for 15 steps on random tokens, logging every
2 steps and evaluating every 4. "printer" turns the progress bar off (PrinterCallback) and sets
transformers logging to INFO so that the start-up banner is printed.
"""

import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, rows: int) -> None:
        self.tokens = torch.randint(0, 32, (rows, 16))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


def main(mode: str) -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=32, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    )
    if mode == "printer":
        hf_logging.set_verbosity_info()  # type: ignore[no-untyped-call]
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=4,
            num_train_epochs=3,
            logging_steps=2,
            eval_strategy="steps",
            eval_steps=4,
            save_strategy="no",
            report_to=[],
            disable_tqdm=(mode == "printer"),
            use_cpu=True,
            learning_rate=1e-3,
        )
        trainer = Trainer(
            model=model, args=args, train_dataset=RandomTokens(20), eval_dataset=RandomTokens(8)
        )
        trainer.train()


if __name__ == "__main__":
    main(sys.argv[1])
