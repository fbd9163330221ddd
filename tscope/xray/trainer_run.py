"""`tscope xray RUN_DIR`: audit a Hugging Face Trainer run's step without an entry file.

The run's `training_args.bin` is decoded without unpickling (tscope.ingest's pickle decoder) and
its `config.json` names the model class; together they set up the real Trainer step on the tracer
(trainer_step.py). A run trained on several processes is audited on as many CPU processes
(torchrun, gloo), and the embedding gradient is read on rank 0 after the all-reduce.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.safe_fs import is_real_folder, is_regular_file
from tscope.model.plain_digits import is_plain_digits
from tscope.model.xray import XrayResult
from tscope.torchrun import last_error_line, run_ranks
from tscope.xray.probe import DEFAULT_LENGTHS, Probe, cycled_lengths, make_probe
from tscope.xray.tracer import ForwardCall
from tscope.xray.trainer_args_values import count_setting, number_setting, seed_setting
from tscope.xray.trainer_step import TrainerSettings

# The probe batch of a Trainer step has per_device × accumulation × ranks sequences; above this
# the audit would stop being a quick check.
MAX_STEP_SEQUENCES = 512
# More ranks than this are audited on this many CPU processes would be slow; refuse instead.
MAX_AUDIT_RANKS = 8
RANK_TIMEOUT_SECONDS = 600
MAX_SIDE_FILE_BYTES = 4 * 1024 * 1024
# training_args.bin does not record a data_collator passed to the Trainer: say what was assumed.
CUSTOM_COLLATOR_NOTE = (
    "The step uses the collator the saved arguments imply (the Trainer's padding collator, or "
    "TRL's for an SFTTrainer run); a run that passed its own data_collator is not audited as it "
    "ran: give --entry FILE.py with a train_step(model, sequences) that batches with it."
)  # config.json / tokenizer_config.json: a few kB in practice


def _small_json(path: Path) -> Any:
    """A side file's JSON, or None when it is missing, oversized, broken, a link or not a
    regular file (safe_json: a config.json linked elsewhere is not read)."""
    from tscope.ingest import safe_json

    if not is_regular_file(path):
        return None
    try:
        return safe_json.load_file(path, path.name, MAX_SIDE_FILE_BYTES)
    except UnreadableInput:
        return None


def find_run_files(run_dir: Path) -> tuple[Path, Path | None]:
    """training_args.bin and config.json: the run root's, else the newest checkpoint's."""
    if not run_dir.is_dir():
        raise UsageError(
            f"{run_dir} is not a directory. Pass a Hugging Face Trainer run directory."
        )
    folders = [run_dir]
    checkpoints = [  # a linked checkpoint folder is not read through (docs/security.md)
        p
        for p in run_dir.glob("checkpoint-*")
        if is_real_folder(p) and is_plain_digits(p.name[11:])
    ]
    folders += sorted(checkpoints, key=lambda p: -int(p.name[11:]))
    for folder in folders:
        arguments = folder / "training_args.bin"
        if is_regular_file(arguments):
            config = folder / "config.json"
            return arguments, config if is_regular_file(config) else None
    raise UsageError(
        f"{run_dir} holds no training_args.bin (in the folder or a checkpoint-N/): it is not a "
        "Hugging Face Trainer run. Pass --entry FILE.py defining train_step(model, sequences)."
    )


def read_settings(run_dir: Path) -> tuple[TrainerSettings, list[str]]:
    from tscope.ingest.checkpoints.pickle_literals import torch_file_literals

    arguments_file, config_file = find_run_files(run_dir)
    decoded = torch_file_literals(arguments_file)
    if not isinstance(decoded, dict):
        raise UsageError(
            f"Cannot read {arguments_file}: it does not decode as TrainingArguments. Pass --entry "
            "FILE.py defining train_step(model, sequences) instead."
        )
    notes = [f"Trainer arguments from {arguments_file} (decoded without unpickling)."]
    defaults = TrainerSettings()
    state = decoded.get("distributed_state")
    world = state.get("num_processes") if isinstance(state, dict) else None
    model_class, accepts = _model_class(config_file, notes)
    settings = TrainerSettings(
        per_device_train_batch_size=count_setting(
            decoded, "per_device_train_batch_size", arguments_file
        ),
        gradient_accumulation_steps=count_setting(
            decoded, "gradient_accumulation_steps", arguments_file
        ),
        average_tokens_across_devices=bool(
            decoded.get("average_tokens_across_devices", defaults.average_tokens_across_devices)
        ),
        label_smoothing_factor=number_setting(decoded, "label_smoothing_factor", defaults),
        world_size=int(world) if isinstance(world, int) and world > 0 else 1,
        seed=seed_setting(decoded, arguments_file),
        train_sampling_strategy=str(
            decoded.get("train_sampling_strategy") or defaults.train_sampling_strategy
        ),
        use_cache=bool(decoded.get("use_cache", defaults.use_cache)),
        padding_side=_padding_side(arguments_file.parent, notes),
        model_accepts_loss_kwargs=accepts,
        model_class=model_class,
        **_sft_settings(decoded, notes),
    )
    return settings, notes


# Fields only TRL's SFTConfig has: a run whose training_args.bin holds them was an SFTTrainer run.
_SFT_MARKERS = ("packing", "dataset_text_field", "completion_only_loss")


def _sft_settings(decoded: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """SFTTrainer's settings when the saved arguments are an SFTConfig; {} for a Trainer run."""
    if not all(key in decoded for key in _SFT_MARKERS):
        return {}
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise UsageError(
            "The run was trained with TRL's SFTTrainer (SFTConfig in training_args.bin); auditing "
            "its step needs TRL: pip install 'tscope-ml[xray]'."
        )
    notes[:] = [n for n in notes if not n.startswith("Collator:")]  # TRL's collator, below
    defaults = TrainerSettings()
    max_length = decoded.get("max_length")
    settings = {
        "trainer": "SFTTrainer",
        "packing": bool(decoded.get("packing")),
        "packing_strategy": str(decoded.get("packing_strategy") or defaults.packing_strategy),
        "padding_free": bool(decoded.get("padding_free")),
        "max_length": max_length if isinstance(max_length, int) and max_length > 0 else None,
        "loss_type": str(decoded.get("loss_type") or defaults.loss_type),
        "shuffle_dataset": bool(decoded.get("shuffle_dataset")),
    }
    notes.append(
        "SFTTrainer run (SFTConfig): packing="
        f"{settings['packing']} ({settings['packing_strategy']}), padding_free="
        f"{settings['padding_free']}, loss_type={settings['loss_type']}; the probe is prepared, "
        "packed and collated by TRL itself (DataCollatorForLanguageModeling)."
    )
    if decoded.get("completion_only_loss") or decoded.get("assistant_only_loss"):
        notes.append(
            "The run masked prompts (completion_only_loss / assistant_only_loss): the probe labels "
            "every token, so the audit shows how labelled tokens are weighted, not which are."
        )
    return settings


def _model_class(config_file: Path | None, notes: list[str]) -> tuple[str, bool]:
    """The run's model class (config.json `architectures`) and whether its forward takes the
    loss kwargs (num_items_in_batch), decided as Trainer.__init__ decides it."""
    import inspect

    if config_file is None:
        notes.append("No config.json: the model is assumed to accept num_items_in_batch.")
        return "", True
    config = _small_json(config_file)
    if not isinstance(config, dict):
        notes.append(
            f"{config_file} is unreadable: the model is assumed to accept num_items_in_batch."
        )
        return "", True
    names = config.get("architectures")
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    import transformers

    model_class = _transformers_model(transformers, name)
    if model_class is None:
        notes.append(
            f"Model class {name or '(none)'} is not a transformers model: assumed to accept "
            "num_items_in_batch."
        )
        return name, True
    if hasattr(model_class, "accepts_loss_kwargs"):
        accepts = bool(model_class.accepts_loss_kwargs)
    else:
        parameters = inspect.signature(model_class.forward).parameters.values()
        accepts = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)
    notes.append(
        f"Model class {name} (config.json) "
        + ("accepts" if accepts else "does not accept")
        + " num_items_in_batch; the tracer's step follows it."
    )
    return name, accepts


def _transformers_model(transformers: Any, name: str) -> type[Any] | None:
    """transformers' model class `name`, or None for anything else the name reaches.

    config.json comes from the run's author: `["__version__"]` or `["Trainer"]` reaches a string
    or a class with no model forward, so only PreTrainedModel subclasses count (as
    param_order._architecture_names checks)."""
    if not name.isidentifier():
        return None
    try:
        found = getattr(transformers, name, None)
    except Exception:  # transformers' lazy import of that name failed (a missing backend)
        return None
    if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
        return found
    return None


def _padding_side(folder: Path, notes: list[str]) -> str:
    tokenizer_config = folder / "tokenizer_config.json"
    side = "right"
    loaded = _small_json(tokenizer_config)
    if isinstance(loaded, dict) and loaded.get("padding_side") in ("left", "right"):
        side = loaded["padding_side"]
    notes.append(
        f"Collator: pads each micro-batch to its longest sequence on the {side}, labels -100 on "
        "padding (a causal-LM Trainer run's padding collator)."
    )
    return side


def xray_trainer_run(
    run_dir: str | Path,
    lengths: Sequence[int] | None = None,
    settings: TrainerSettings | None = None,
) -> XrayResult:
    """Audit the Trainer step the run's arguments set up (or `settings`, when given)."""
    from tscope.analyzers.xray import fit_rules, matching_rules
    from tscope.xray.api import LEAK_RELATIVE_THRESHOLD
    from tscope.xray.leak import run_leak_with
    from tscope.xray.tracer import build_tracer
    from tscope.xray.weighting import boundary_weight, reference_gradient, token_measures

    started = time.perf_counter()
    notes: list[str] = []
    if settings is None:
        settings, notes = read_settings(Path(run_dir))
    count = settings.sequences_per_step()
    if count > MAX_STEP_SEQUENCES:
        raise UsageError(
            f"{run_dir}: one step holds {count} sequences (per_device_train_batch_size × "
            f"gradient_accumulation_steps × ranks); the audit handles at most {MAX_STEP_SEQUENCES}."
        )
    if settings.world_size > MAX_AUDIT_RANKS:
        raise UsageError(
            f"{run_dir}: the run used {settings.world_size} processes; the audit runs at most "
            f"{MAX_AUDIT_RANKS} on CPU."
        )
    probe = make_probe(cycled_lengths(lengths or DEFAULT_LENGTHS, count))
    notes.append(CUSTOM_COLLATOR_NOTE)
    try:
        if settings.world_size > 1:
            gradient, calls, ranks = _distributed_step(settings, probe)
        else:
            gradient, calls = _local_step(settings, probe)
            ranks = [0] * len(calls)
        leak = run_leak_with(_trainer_step(settings), probe)
    except (ValueError, TypeError, RuntimeError, KeyError) as error:
        raise UsageError(
            f"The {settings.trainer} step of {run_dir} failed on the tracer "
            f"({type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}). "
            "A run with its own data_collator, model or compute_loss needs --entry FILE.py "
            "defining train_step(model, sequences) that batches as the run does."
        ) from None
    reference = reference_gradient(build_tracer(probe.vocab_size, "weighting"), probe)
    measures = token_measures(gradient, reference, probe, calls, ranks)
    notes.append(
        f"Leak mode runs the real {settings.trainer} step once per sequence, only that sequence "
        "labelled, on one process (data parallelism does not mix sequences)."
    )
    result = XrayResult(
        mode="trainer",
        source=str(run_dir),
        lengths=probe.lengths,
        intended="token_mean",
        tokens=tuple(measures),
        forward_calls=len(calls),
        world_size=settings.world_size,
        boundary_weight=boundary_weight(gradient, reference, probe),
        leak_matrix=tuple(tuple(row) for row in leak.matrix),
        leak_threshold=LEAK_RELATIVE_THRESHOLD,
        nan_forwards=leak.nan_forwards,
        settings=settings.as_dict(),
        notes=tuple(notes),
    )
    fits = fit_rules(result.tokens)
    result = replace(result, fits=fits, matched_rules=tuple(matching_rules(fits)))
    return replace(result, seconds=round(time.perf_counter() - started, 3))


def _local_step(settings: TrainerSettings, probe: Probe) -> tuple[Any, list[ForwardCall]]:
    from tscope.xray.tracer import build_tracer
    from tscope.xray.trainer_step import trainer_step_gradient

    model = build_tracer(probe.vocab_size, "weighting")
    return trainer_step_gradient(settings, model, probe.copy_sequences())


def _trainer_step(settings: TrainerSettings) -> Any:
    """Leak mode's step: the Trainer's own step on one process (its sampler, collator and loss),
    the embedding gradient read before the optimizer."""
    from tscope.xray.trainer_step import trainer_step_gradient

    single = replace(settings, world_size=1, per_device_train_batch_size=_local_batch(settings))

    def gradient_of(model: Any, sequences: list[dict[str, list[int]]]) -> Any:
        gradient, _calls = trainer_step_gradient(single, model, sequences)
        return gradient

    return gradient_of


def _local_batch(settings: TrainerSettings) -> int:
    """One process takes the whole probe batch: the ranks' micro-batches side by side."""
    return settings.per_device_train_batch_size * settings.world_size


def _distributed_step(
    settings: TrainerSettings, probe: Probe
) -> tuple[Any, list[ForwardCall], list[int]]:
    """torchrun with one CPU process per rank of the run; rank 0's gradient after the
    all-reduce, and every rank's forwards (in rank order)."""
    import torch

    with tempfile.TemporaryDirectory(prefix="tscope-xray-ranks-") as scratch:
        folder = Path(scratch)
        spec = folder / "spec.json"
        spec.write_text(
            json.dumps(
                {"settings": settings.as_dict(), "lengths": list(probe.lengths), "out": scratch}
            ),
            encoding="utf-8",
        )
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
        done = run_ranks(
            "tscope.xray.rank_worker",
            spec,
            settings.world_size,
            environment,
            RANK_TIMEOUT_SECONDS,
            f"The {settings.world_size}-process audit",
        )
        if done.returncode != 0:
            tail = last_error_line(done)
            raise UsageError(
                f"The {settings.world_size}-process audit (torchrun, gloo) failed: {tail}"
            )
        calls: list[ForwardCall] = []
        ranks: list[int] = []
        gradient = None
        for rank in range(settings.world_size):
            record = torch.load(folder / f"rank-{rank}.pt", weights_only=True)
            if rank == 0:
                gradient = record["gradient"]
            for token_ids, scored in record["calls"]:
                calls.append(ForwardCall(list(token_ids), scored))
                ranks.append(rank)
    return gradient, calls, ranks
