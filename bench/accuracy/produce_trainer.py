"""Producer: `transformers.Trainer` training a tiny random GPT-2 or Llama on the fixture corpus.

The run folder is what the Trainer writes: `checkpoint-N/` (weights, optimizer, scheduler, RNG,
trainer_state.json) and TensorBoard events from its own TensorBoardCallback under `runs/`. The
pieces come from fixtures/: the corpus and dataset (`text_corpus`), the recording collator and the
crash callback (`planted`). The LR schedule is a LambdaLR over `schedules.multiplier`, passed
through `optimizers=(opt, sched)`, so a planted LR cause is in the scheduler the Trainer steps
(bench/ood's fifth block also trains the Trainer's own `reduce_lr_on_plateau`, which no LR cause
is planted in). bench/ood's fifth block's knobs: `epochs` (`num_train_epochs` over a dataset of
the corpus' first steps/epochs optimizer steps' rows, no `max_steps`), `label_smoothing`
(`label_smoothing_factor`) and `corpus` (text_corpus.CORPORA).

A resume cause is two phases, each in its own process: the first dies after `crash_after` (no
final save), the checkpoint is damaged as planted, and the second resumes from it with
`trainer.train(resume_from_checkpoint=...)`. The Trainer loads optimizer and scheduler only when
both files exist, so deleting either one loses both (the ground truth says so).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spec import (
    LR_JUMP_PERSISTENT,
    LR_JUMP_TRANSIENT,
    LR_RAMP,
    RESUME_CAUSES,
    RESUME_OPTIMIZER_LOST,
    RESUME_SCHEDULER_LOST,
    RESUME_WEIGHTS_REINIT,
    WARMUP_TOO_HOT,
    RunSpec,
    knob,
)
from trainer_models import build_model

TENSORBOARD_SUBDIR = "runs"
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
SAVE_TOTAL_LIMIT = 3
SGD_MOMENTUM = 0.9
EVAL_SAMPLES = 32  # the first blocks of the corpus, evaluated every `eval_every` steps (bench/ood)
# bench/ood's fifth block: the Trainer's own "reduce_lr_on_plateau" scheduler (no warm-up), stepped
# on the evaluation loss every `eval_every` steps, with these `lr_scheduler_kwargs`.
PLATEAU = "reduce_lr_on_plateau"
PLATEAU_KWARGS = {"factor": 0.5, "patience": 2}
LR_CAUSES = (LR_JUMP_TRANSIENT, LR_JUMP_PERSISTENT, LR_RAMP, WARMUP_TOO_HOT)  # in `multiplier`


def phases(spec: RunSpec) -> list[str]:
    if spec.cause in RESUME_CAUSES:
        return ["first", "resume"]
    resumes = int(knob(spec, "resumes"))
    if resumes:  # bench/ood: preempted `resumes` times, each resumed properly
        return ["first"] + [f"preempted-resume{n}" for n in range(1, resumes)] + ["resume"]
    return ["train"]


def _preemptions(spec: RunSpec) -> list[tuple[int, int]]:
    """(checkpoint resumed from, step the process died after) of each healthy preemption: the
    n-th dies half a save interval after its n-th checkpoint."""
    return [
        (n * spec.save_every, n * spec.save_every + spec.save_every // 2)
        for n in range(1, int(knob(spec, "resumes")) + 1)
    ]


def _crash_after(spec: RunSpec, phase: str) -> int | None:
    if spec.cause in RESUME_CAUSES:
        return int(spec.plant["crash_after"]) if phase == "first" else None
    if phase == "first":
        return _preemptions(spec)[0][1] if int(knob(spec, "resumes")) else None
    if phase.startswith("preempted-resume"):
        return _preemptions(spec)[int(phase.removeprefix("preempted-resume"))][1]
    return None


def _resumed_from(spec: RunSpec, phase: str) -> int | None:
    if spec.cause in RESUME_CAUSES:
        return int(spec.plant["resume_from"]) if phase == "resume" else None
    if phase == "resume" and int(knob(spec, "resumes")):
        return _preemptions(spec)[-1][0]
    if phase.startswith("preempted-resume"):
        return _preemptions(spec)[int(phase.removeprefix("preempted-resume")) - 1][0]
    return None


def between_phases(spec: RunSpec, run_dir: Path) -> list[str]:
    """Damage the checkpoint the resume reads, as planted; returns what was done."""
    if spec.cause not in RESUME_CAUSES:
        return ["preempted; resumed from the last checkpoint with everything in it"]
    checkpoint = run_dir / f"checkpoint-{spec.plant['resume_from']}"
    removed = {RESUME_OPTIMIZER_LOST: "optimizer.pt", RESUME_SCHEDULER_LOST: "scheduler.pt"}
    if spec.cause in removed:
        (checkpoint / removed[spec.cause]).unlink()
        return [
            f"deleted {checkpoint.name}/{removed[spec.cause]}: the Trainer then loads neither "
            "optimizer nor scheduler (fresh AdamW moments, LR warm-up restarts)"
        ]
    return ["the resumed process re-initializes the weights after loading the checkpoint"]


def _optimizers(model: Any, spec: RunSpec) -> tuple[Any, Any]:
    """The optimizer split as the Trainer splits it (no decay on biases and norms): AdamW, or
    (bench/ood's `optimizer` knob) transformers' Adafactor with a fixed LR or SGD with momentum;
    with a LambdaLR."""
    import torch
    from schedules import multiplier

    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.ndim < 2]
    weight_decay = knob(spec, "weight_decay")  # bench/ood's third block may set it
    groups = [
        {"params": decay, "weight_decay": WEIGHT_DECAY if weight_decay is None else weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    name = knob(spec, "optimizer")
    optimizer: Any
    if spec.schedule == PLATEAU and (name != "adamw" or spec.cause in LR_CAUSES):
        raise ValueError(f"{PLATEAU} is drawn with AdamW and no planted LR cause only")
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # The settings transformers documents for an external LR schedule.
        optimizer = Adafactor(
            groups, lr=spec.peak_lr, scale_parameter=False, relative_step=False, warmup_init=False
        )
    elif name == "sgd":
        optimizer = torch.optim.SGD(groups, lr=spec.peak_lr, momentum=SGD_MOMENTUM)
    else:
        beta2 = knob(spec, "adam_beta2")  # None: torch's (0.9, 0.999), as the Trainer's AdamW
        betas = {} if beta2 is None else {"betas": (0.9, float(beta2))}
        epsilon = knob(spec, "adam_epsilon")  # None: torch's 1e-8 (the Trainer's adam_epsilon)
        eps = {} if epsilon is None else {"eps": float(epsilon)}
        optimizer = torch.optim.AdamW(groups, lr=spec.peak_lr, **betas, **eps)
    if spec.schedule == PLATEAU:  # the Trainer builds its own (TrainingArguments below)
        return optimizer, None
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: multiplier(spec, i + 1))
    return optimizer, scheduler


class _SequentialBlocks:
    """The corpus blocks in order, cycling: a streamed dataset (the Trainer does not shuffle an
    IterableDataset), whose changes of source text make natural bumps in the loss."""

    def __init__(self, dataset: Any, total: int) -> None:
        self.dataset = dataset
        self.total = total

    def make(self) -> Any:
        import torch

        dataset, total = self.dataset, self.total

        class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                for index in range(total):
                    yield dataset[index % len(dataset)]

        return Stream()


def train_phase(spec: RunSpec, run_dir: Path, phase: str, record_path: Path) -> None:
    import planted
    import text_corpus
    import torch
    from planting import PlantedBatches, freeze, frozen_prefix
    from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

    torch.set_num_threads(1)
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir / TENSORBOARD_SUBDIR)
    dataset, tokenizer, _ = text_corpus.build_dataset(str(knob(spec, "corpus")))
    vocab_size = tokenizer.vocab_size
    set_seed(spec.seed)
    model = build_model(spec, vocab_size)
    batches = PlantedBatches(spec, vocab_size)

    class Collator(planted.RecordingCollator):
        def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
            input_ids = torch.stack([feature["input_ids"] for feature in features])
            if "eval" in features[0]:  # evaluation batches are neither planted nor recorded
                return {"input_ids": input_ids, "labels": input_ids.clone()}
            self.sample_ids_per_call.append([int(feature["sample_id"]) for feature in features])
            input_ids = batches(input_ids)
            return {"input_ids": input_ids, "labels": input_ids.clone()}

    collator = Collator()
    callbacks: list[TrainerCallback] = []
    crash_after = _crash_after(spec, phase)
    if crash_after is not None:
        callbacks.append(planted.CrashAfterStep(crash_after, collator, record_path))
    prefix = frozen_prefix(spec)
    if prefix is not None:
        callbacks.append(_FreezeAt(int(spec.plant["step"]), prefix, freeze))
    if phase == "resume" and spec.cause == RESUME_WEIGHTS_REINIT:
        set_seed(spec.seed)
        callbacks.append(_Reinitialize(build_model(spec, vocab_size).state_dict()))

    train_dataset: Any = dataset
    epochs = int(knob(spec, "epochs"))  # bench/ood's fifth block: a small dataset, n epochs
    length: dict[str, Any] = {"max_steps": spec.steps}
    if epochs:
        if spec.steps % epochs:
            raise ValueError(f"{spec.steps} steps are not {epochs} whole epochs")
        rows = spec.steps // epochs * spec.batch_size * spec.grad_accum
        train_dataset = [dataset[index] for index in range(rows)]
        length = {"num_train_epochs": epochs}
    if spec.data_order == "sequential":
        total = spec.steps * spec.batch_size * spec.grad_accum + spec.batch_size
        train_dataset = _SequentialBlocks(dataset, total).make()
    eval_every = int(knob(spec, "eval_every"))
    eval_dataset = None
    evaluation: dict[str, Any] = {}  # a benchmark run keeps the Trainer's defaults (no eval)
    if eval_every:
        eval_dataset = [{**dataset[i], "eval": True} for i in range(EVAL_SAMPLES)]
        evaluation = {
            "eval_strategy": "steps",
            "eval_steps": eval_every,
            "per_device_eval_batch_size": spec.batch_size,
        }
    if spec.schedule == PLATEAU:
        if not eval_every:
            raise ValueError(f"{PLATEAU} needs an evaluation (eval_every)")
        evaluation.update(lr_scheduler_type=PLATEAU, lr_scheduler_kwargs=dict(PLATEAU_KWARGS))
    max_grad_norm = knob(spec, "max_grad_norm")  # bench/ood's third block: 0 = no clipping
    report_to = str(knob(spec, "report_to")) or "tensorboard"
    save_limit = knob(spec, "save_total_limit")  # bench/ood's fourth block may keep fewer
    smoothing = float(knob(spec, "label_smoothing"))  # bench/ood's fifth block
    args = TrainingArguments(
        output_dir=str(run_dir),
        **length,
        per_device_train_batch_size=spec.batch_size,
        gradient_accumulation_steps=spec.grad_accum,
        max_grad_norm=MAX_GRAD_NORM if max_grad_norm is None else float(max_grad_norm),
        logging_steps=int(knob(spec, "logging_steps")),
        logging_first_step=bool(knob(spec, "logging_first_step")),
        **evaluation,
        save_steps=spec.save_every,
        save_total_limit=SAVE_TOTAL_LIMIT if save_limit is None else int(save_limit),
        gradient_checkpointing=bool(knob(spec, "gradient_checkpointing")),
        **({"label_smoothing_factor": smoothing} if smoothing else {}),
        report_to=[report_to],
        seed=spec.seed,
        bf16=spec.precision == "bf16",
        use_cpu=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        callbacks=callbacks,
        optimizers=_optimizers(model, spec),
    )
    resume = None
    resumed_from = _resumed_from(spec, phase)
    if resumed_from is not None:
        resume = str(run_dir / f"checkpoint-{resumed_from}")
    trainer.train(resume_from_checkpoint=resume)
    planted.write_phase_record(record_path, collator, trainer.state.global_step)


def _callback_base() -> Any:
    from transformers import TrainerCallback

    return TrainerCallback


class _FreezeAt(_callback_base()):  # type: ignore[misc]
    """Stops training one block from optimizer step `step` on (before that step's update)."""

    def __init__(self, step: int, prefix: str, freeze: Any) -> None:
        self.step, self.prefix, self.freeze, self.done = step, prefix, freeze, False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.done and state.global_step >= self.step - 1:
            self.freeze(kwargs["model"], self.prefix)
            self.done = True


class _Reinitialize(_callback_base()):  # type: ignore[misc]
    """After the checkpoint was loaded, put the initial weights back (a resume that rebuilt the
    model after loading the checkpoint, keeping the loaded optimizer and scheduler)."""

    def __init__(self, initial: dict[str, Any]) -> None:
        self.initial = initial

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        with torch.no_grad():
            kwargs["model"].load_state_dict(self.initial)
