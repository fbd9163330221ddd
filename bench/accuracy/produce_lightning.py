"""Producer: `lightning.Trainer` fitting a LightningModule around the nanoGPT-style model.

The run folder is what Lightning writes: the logger's folder (`CSVLogger` → `lightning_logs/
version_0/metrics.csv`, or `TensorBoardLogger` → `lightning_logs/version_0/events.*`, by run
index) and `ModelCheckpoint` files `checkpoints/epoch=E-step=N.ckpt` every `save_every` steps.
Logged series: `train_loss` (every step), the LR from `LearningRateMonitor` and `grad_norm`
(computed in `on_before_optimizer_step`, before clipping, as the Trainer logs it). Lightning logs
at the step count before the update, so optimizer step k is logged as k-1 (spec.LOG_STEP_OFFSET).
The schedule is a LambdaLR stepped every optimizer step (`interval: "step"`). bench/ood's fifth
block adds a validation loop (`eval_every`: `val_check_interval` of that many optimizer steps'
batches, `check_val_every_n_epoch=None`; `val_loss` over the corpus' first blocks, unplanted) and
the `corpus` knob (text_corpus.CORPORA); its sixth block the `max_grad_norm` knob (None: clipping
at GRAD_CLIP; 0: none, Lightning's own default `gradient_clip_val=None`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spec import RunSpec, knob

WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
EVAL_SAMPLES = 32  # the corpus' first blocks, the validation set of `eval_every` (bench/ood)


def phases(spec: RunSpec) -> list[str]:
    return ["train"]


def between_phases(spec: RunSpec, run_dir: Path) -> list[str]:
    raise ValueError("no planted resume for Lightning")


def logger_kind(spec: RunSpec) -> str:
    chosen = str(knob(spec, "lightning_logger"))  # bench/ood sets it; the benchmark alternates
    return chosen or ("csv" if spec.index % 2 == 0 else "tensorboard")


def train_phase(spec: RunSpec, run_dir: Path, phase: str, record_path: Path) -> None:
    import json

    import lightning
    import text_corpus
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from planting import PlantedBatches, freeze, frozen_prefix
    from schedules import multiplier

    from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig, optimizer_groups

    torch.set_num_threads(1)
    lightning.seed_everything(spec.seed, verbose=False)
    dataset, tokenizer, _ = text_corpus.build_dataset(str(knob(spec, "corpus")))
    batches = PlantedBatches(spec, tokenizer.vocab_size)

    def collate(features: list[dict[str, Any]]) -> torch.Tensor:
        return batches(torch.stack([feature["input_ids"] for feature in features]))

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = TinyGPT(
                TinyGPTConfig(
                    block_size=text_corpus.BLOCK_TOKENS,
                    vocab_size=tokenizer.vocab_size,
                    n_layer=spec.layers,
                    n_head=spec.heads,
                    n_embd=spec.hidden,
                    bias=True,
                )
            )
            self.prefix = frozen_prefix(spec)

        def training_step(self, batch: torch.Tensor, batch_index: int) -> torch.Tensor:
            _, loss = self.model(batch[:, :-1], batch[:, 1:])
            self.log("train_loss", loss, on_step=True, on_epoch=False)
            return loss

        def on_train_batch_start(self, batch: Any, batch_index: int) -> None:
            if self.prefix is not None and self.trainer.global_step + 1 >= int(spec.plant["step"]):
                freeze(self.model, self.prefix)
                self.prefix = None

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            norms = [p.grad.detach().norm() for p in self.parameters() if p.grad is not None]
            self.log("grad_norm", torch.stack(norms).norm(), on_step=True, on_epoch=False)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(
                optimizer_groups(self.model, WEIGHT_DECAY), lr=spec.peak_lr, betas=BETAS
            )
            scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda i: multiplier(spec, i + 1)
            )
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
            }

    class ValidatedModule(Module):
        def validation_step(self, batch: torch.Tensor, batch_index: int) -> torch.Tensor:
            _, loss = self.model(batch[:, :-1], batch[:, 1:])
            self.log("val_loss", loss)
            return loss

    eval_every = int(knob(spec, "eval_every"))  # bench/ood's fifth block; else no validation
    validation: dict[str, Any] = {}
    if eval_every:
        validation = {
            "val_dataloaders": torch.utils.data.DataLoader(
                [dataset[index] for index in range(EVAL_SAMPLES)],
                batch_size=spec.batch_size,
                collate_fn=lambda features: torch.stack([f["input_ids"] for f in features]),
            )
        }
    shuffle = spec.data_order == "shuffled"
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=shuffle,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(spec.seed) if shuffle else None,
        drop_last=True,
    )
    if logger_kind(spec) == "csv":
        logger: Any = CSVLogger(str(run_dir), name="lightning_logs")
    else:
        logger = TensorBoardLogger(str(run_dir), name="lightning_logs")
    clip = knob(spec, "max_grad_norm")  # bench/ood's sixth block: 0 = no clipping
    trainer = lightning.Trainer(
        max_steps=spec.steps,
        accelerator="cpu",
        devices=1,
        precision="bf16-mixed" if spec.precision == "bf16" else "32-true",
        accumulate_grad_batches=spec.grad_accum,
        gradient_clip_val=GRAD_CLIP if clip is None else float(clip) or None,
        logger=logger,
        log_every_n_steps=int(knob(spec, "logging_steps")),
        callbacks=[
            LearningRateMonitor(logging_interval="step"),
            ModelCheckpoint(
                dirpath=str(run_dir / "checkpoints"),
                every_n_train_steps=spec.save_every,
                save_top_k=-1,
            ),
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **(
            {"val_check_interval": eval_every * spec.grad_accum, "check_val_every_n_epoch": None}
            if eval_every
            else {}
        ),
    )
    trainer.fit(ValidatedModule() if eval_every else Module(), loader, **validation)
    record_path.write_text(json.dumps({"global_step": trainer.global_step}), encoding="utf-8")
