"""Run TRL's real `SFTTrainer` step on the tracer, with an SFT run's own SFTConfig settings.

    gradient, calls = sft_step_gradient(settings, model, sequences)

TRL prepares the probe as it prepares a tokenized dataset (`input_ids` + `labels` columns are
taken as processed), packs it when the run packed (`pack_dataset` with the run's strategy; BFD
keeps each sequence's boundaries in `seq_lengths`), and collates it with its own
`DataCollatorForLanguageModeling` (`padding_free` flattens a micro-batch into one row whose
`position_ids` restart at every sequence, without an attention mask). Its `compute_loss` then
runs the fused-head loss over `num_items_in_batch`. The tokenizer is a word-level one built in
memory over the tracer's ids (nothing is downloaded); it only supplies the pad id.
"""

from __future__ import annotations

import math
import tempfile
from typing import TYPE_CHECKING, Any

from tscope.xray.tracer import CallRecorder, ForwardCall, embedding_gradient

if TYPE_CHECKING:
    from tscope.xray.trainer_step import TrainerSettings

INSTALL_TRL = "pip install 'tscope-ml[xray]' (TRL)"


def tracer_tokenizer(vocab_size: int, pad_id: int) -> Any:
    """A word-level fast tokenizer whose ids are the tracer's (`<t0>` … `<tN>`)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocabulary = {f"<t{i}>": i for i in range(vocab_size)}
    backend = Tokenizer(WordLevel(vocab=vocabulary, unk_token=f"<t{pad_id}>"))
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        pad_token=f"<t{pad_id}>",
        eos_token="<t2>",
        unk_token=f"<t{pad_id}>",
    )


def audit_max_length(settings: TrainerSettings, lengths: list[int]) -> int | None:
    """The packed row length: the run's max_length, shortened so that the probe fills the step's
    rows as the run's data filled them (per_device × accumulation × ranks rows); never below the
    longest sequence (BFD truncates, it does not split). None without packing: truncation and
    TRL's fully-masked filter must not drop leak mode's unlabelled sequences."""
    if not settings.packing:
        return None
    rows = max(1, settings.sequences_per_step())
    fill = math.ceil(sum(lengths) / rows)
    wanted = max(fill, max(lengths))
    return min(settings.max_length, wanted) if settings.max_length else wanted


def sft_step_gradient(
    settings: TrainerSettings, model: Any, sequences: list[dict[str, list[int]]]
) -> tuple[Any, list[ForwardCall]]:
    """(embedding gradient after the SFT step's backward and all-reduce, this rank's forwards)."""
    import transformers
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from tscope.xray.trainer_step import PAD_ID, audit_step_arguments

    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    captured: dict[str, Any] = {}

    class Capture(TrainerCallback):  # type: ignore[misc]
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            captured["gradient"] = embedding_gradient(model)

    lengths = [len(s["input_ids"]) for s in sequences]
    recorder = CallRecorder().attach(model)
    with tempfile.TemporaryDirectory(prefix="tscope-xray-sft-") as scratch:
        arguments = SFTConfig(
            **audit_step_arguments(settings, scratch),
            packing=settings.packing,
            packing_strategy=settings.packing_strategy,
            padding_free=settings.padding_free,
            max_length=audit_max_length(settings, lengths),
            loss_type=settings.loss_type,
            shuffle_dataset=settings.shuffle_dataset,
            completion_only_loss=False,  # the probe's labels already say which tokens count
            bf16=False,  # SFTConfig's default is bf16; the audit measures weights, not rounding
            fp16=False,
        )
        trainer = SFTTrainer(
            model=model,
            args=arguments,
            train_dataset=Dataset.from_list(sequences),
            processing_class=tracer_tokenizer(model.config.vocab_size, PAD_ID),
            callbacks=[Capture()],
        )
        trainer.model_accepts_loss_kwargs = settings.model_accepts_loss_kwargs
        trainer.remove_callback(PrinterCallback)
        try:
            trainer.train()
        finally:
            recorder.detach()
    return captured.get("gradient", embedding_gradient(model)), recorder.calls
