"""Run the real `transformers.Trainer` training step on the tracer, with a run's own arguments.

    settings = TrainerSettings(per_device_train_batch_size=2, gradient_accumulation_steps=4)
    gradient, calls = trainer_step_gradient(settings, model, sequences)

One optimizer step of `Trainer.train()`: its sampler, its accumulation loop (`get_batch_samples`
counting `num_items_in_batch`, `training_step`, `compute_loss` with the label smoother), its
all-reduce under data parallelism. Clipping is switched off (`max_grad_norm=0`) and the
embedding gradient is read in `on_pre_optimizer_step`, before the optimizer (SGD, learning rate
0) would touch anything.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from tscope.xray.tracer import CallRecorder, ForwardCall, embedding_gradient

PAD_ID = 0  # the tracer's pad id; probe tokens start at TOKEN_ID_OFFSET


@dataclass(frozen=True)
class TrainerSettings:
    """The run's arguments that decide how a step weights its tokens (defaults: Trainer 5.x)."""

    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    average_tokens_across_devices: bool = True
    label_smoothing_factor: float = 0.0
    world_size: int = 1
    seed: int = 42
    train_sampling_strategy: str = "random"
    use_cache: bool = False  # the Trainer sets model.config.use_cache from it
    padding_side: str = "right"
    model_accepts_loss_kwargs: bool = True  # the run's model class, as the Trainer inspects it
    model_class: str = ""
    # TRL SFTTrainer runs (SFTConfig in training_args.bin); ignored by the plain Trainer.
    trainer: str = "Trainer"  # or "SFTTrainer"
    packing: bool = False
    packing_strategy: str = "bfd"
    padding_free: bool = False
    max_length: int | None = 1024
    loss_type: str = "nll"
    shuffle_dataset: bool = False

    def sequences_per_step(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.world_size

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PaddingCollator:
    """Pads each micro-batch to its longest sequence: pad id on input_ids, 0 on attention_mask,
    -100 on labels — what a causal-LM Trainer run's collator does (DataCollatorForSeq2Seq, or
    DataCollatorWithPadding with labels padded); the side follows the tokenizer's padding_side."""

    def __init__(self, padding_side: str = "right") -> None:
        self.padding_side = padding_side

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        longest = max(len(f["input_ids"]) for f in features)
        batch: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
        for feature in features:
            extra = longest - len(feature["input_ids"])
            rows = {
                "input_ids": (list(feature["input_ids"]), PAD_ID),
                "attention_mask": ([1] * len(feature["input_ids"]), 0),
                "labels": (list(feature["labels"]), -100),
            }
            for key, (values, fill) in rows.items():
                padded = (
                    values + [fill] * extra
                    if self.padding_side == "right"
                    else [fill] * extra + values
                )
                batch[key].append(padded)
        return {key: torch.tensor(value) for key, value in batch.items()}


def audit_step_arguments(settings: TrainerSettings, output_dir: str) -> dict[str, Any]:
    """The run's settings that shape one step's weighting, and one unclipped, LR-0 step on CPU
    (the Trainer's and TRL's SFTTrainer's audits share them)."""
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": settings.per_device_train_batch_size,
        "gradient_accumulation_steps": settings.gradient_accumulation_steps,
        "average_tokens_across_devices": settings.average_tokens_across_devices,
        "label_smoothing_factor": settings.label_smoothing_factor,
        "train_sampling_strategy": settings.train_sampling_strategy,
        "use_cache": settings.use_cache,
        "seed": settings.seed,
        "max_steps": 1,
        "max_grad_norm": 0.0,  # no clipping: the audit reads the raw step gradient
        "learning_rate": 0.0,
        "optim": "sgd",
        "lr_scheduler_type": "constant",
        "report_to": [],
        "save_strategy": "no",
        "logging_strategy": "no",
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def trainer_step_gradient(
    settings: TrainerSettings, model: Any, sequences: list[dict[str, list[int]]]
) -> tuple[Any, list[ForwardCall]]:
    """(embedding gradient after the step's backward and all-reduce, this rank's forwards)."""
    if settings.trainer == "SFTTrainer":
        from tscope.xray.sft_step import sft_step_gradient

        return sft_step_gradient(settings, model, sequences)
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    captured: dict[str, Any] = {}

    class Capture(TrainerCallback):  # type: ignore[misc]
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            captured["gradient"] = embedding_gradient(model)

    recorder = CallRecorder().attach(model)
    with tempfile.TemporaryDirectory(prefix="tscope-xray-") as scratch:
        arguments = TrainingArguments(
            **audit_step_arguments(settings, scratch), remove_unused_columns=False
        )
        trainer = Trainer(
            model=model,
            args=arguments,
            train_dataset=sequences,
            data_collator=PaddingCollator(settings.padding_side),
            callbacks=[Capture()],
        )
        trainer.model_accepts_loss_kwargs = settings.model_accepts_loss_kwargs
        trainer.remove_callback(PrinterCallback)  # the step's log line is not tscope's output
        try:
            trainer.train()
        finally:
            recorder.detach()
    return captured.get("gradient", embedding_gradient(model)), recorder.calls
