"""Rebuild the run's optimizer and restore its state as the producer's resume would.

Default: AdamW in the producer's parameter grouping (Trainer decay/no-decay, nanoGPT dim>=2/dim<2,
or one group), checked against the saved state (group sizes, moment shapes), with the saved
hyper-parameters and kernel flags. `Optimizer.load_state_dict` imposes every saved group setting,
fused/foreach included, and the same kernel is what makes chaotic runs replay bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints.optimizer_mapping import TRAINER_NO_DECAY_PATTERN, is_param_id
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.replay.entry import Entry
from tscope.replay.files import CheckpointFiles

if TYPE_CHECKING:
    import torch

NamedParams = list[tuple[str, "torch.nn.Parameter"]]
GroupRule = Callable[["torch.nn.Module", NamedParams], list[NamedParams]]
# Group keys that are not hyper-parameters.
_ID_KEYS = ("params", "param_names")
# TrainingArguments.optim values whose default optimizer is torch's AdamW (fused or not).
_TORCH_ADAMW = ("adamw_torch", "adamw_torch_fused")


@dataclass
class BuiltOptimizer:
    optimizer: torch.optim.Optimizer
    restored: bool  # the saved moments and step counters were loaded
    scheduler_state: Any | None  # scheduler.pt, when the resume rule loads it
    checkpoint_group_lrs: list[float]  # each group's lr as saved: the lr of the next step
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


def build_optimizer(
    model: torch.nn.Module, files: CheckpointFiles, entry: Entry, load_everything: bool = False
) -> BuiltOptimizer:
    """`load_everything`: restore every state the checkpoint holds, even where the producer's own
    resume would drop it (a faithful resume, for --check-resume)."""
    saved = files.optimizer_state()
    notes: list[str] = []
    caveats: list[str] = []
    if load_everything and saved is not None:
        restore, scheduler_state = True, files.scheduler_state()
        notes.append(f"{files.optimizer_file()} restored whatever the producer's resume rule says")
    else:
        restore, scheduler_state = _resume_rule(files, saved, notes)
    if saved is not None and not _is_state_dict(saved):
        raise UsageError(f"{files.optimizer_file()} holds no optimizer state_dict to restore.")
    saved_lrs = _saved_learning_rates(saved, files) if saved is not None else []
    if saved is not None:
        _check_saved_state(saved, files)
    if entry.build_optimizer is not None:
        optimizer = entry.build_optimizer(model)
        notes.append(f"optimizer built by {entry.path}: build_optimizer")
    elif saved is not None:
        optimizer = _adamw_like_saved(model, saved, files, notes)
    else:
        optimizer = _fresh_from_training_args(model, files, notes)
        caveats.append("the checkpoint holds no optimizer state: AdamW restarts from zero moments")
    group_lrs = saved_lrs or [float(g["lr"]) for g in optimizer.param_groups]
    if restore:
        assert saved is not None
        try:
            optimizer.load_state_dict(saved)
        except (ValueError, KeyError, RuntimeError) as error:
            raise UsageError(
                f"{files.optimizer_file()} does not fit the rebuilt optimizer ({error}). Define "
                "build_optimizer(model) in the entry file with the run's parameter groups."
            ) from error
        notes.append(f"optimizer state restored from {files.optimizer_file()}")
        _eager_on_cpu(optimizer, notes)
    elif saved is not None and entry.build_optimizer is None:
        # Same groups and kernel flags, fresh moments: what the resumed run trained with.
        for group, saved_group in zip(optimizer.param_groups, saved["param_groups"], strict=True):
            group.update(_hyper(saved_group))
    return BuiltOptimizer(optimizer, restore, scheduler_state, group_lrs, notes, caveats)


def _resume_rule(files: CheckpointFiles, saved: Any, notes: list[str]) -> tuple[bool, Any | None]:
    """Trainer._load_optimizer_and_scheduler: optimizer.pt AND scheduler.pt present -> load both,
    else neither (a lost scheduler.pt also drops the AdamW moments). nanoGPT: the optimizer."""
    if saved is None:
        return False, None
    if not files.choice.facts.resumes_optimizer_with_scheduler:
        return True, None
    scheduler_state = files.scheduler_state()
    if scheduler_state is None:
        notes.append(
            f"{files.optimizer_file()} not loaded: {files.choice.shown} has no scheduler.pt, and "
            "the Trainer resumes the optimizer and the scheduler only together (fresh moments "
            "and a fresh schedule, as the resumed run had)"
        )
        return False, None
    return True, scheduler_state


def _is_state_dict(saved: Any) -> bool:
    return (
        isinstance(saved, Mapping)
        and isinstance(saved.get("state"), Mapping)
        and isinstance(saved.get("param_groups"), list)
    )


def _hyper(group: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k not in _ID_KEYS}


def _adamw_like_saved(
    model: torch.nn.Module, saved: Mapping[str, Any], files: CheckpointFiles, notes: list[str]
) -> torch.optim.Optimizer:
    import torch

    _require_adam(saved, files)
    groups, rule_name = _matching_groups(model, saved, files)
    hyper = [_hyper(g) for g in saved["param_groups"]]
    first = hyper[0]
    try:
        optimizer = torch.optim.AdamW(
            [
                {"params": [p for _, p in group], **h}
                for group, h in zip(groups, hyper, strict=True)
            ],
            lr=float(first["lr"]),
            fused=first.get("fused"),
            foreach=first.get("foreach"),
        )
    except (ValueError, TypeError, RuntimeError) as error:
        # A crafted setting torch refuses: betas=(0.9,), eps=-1, weight_decay="x".
        raise UnreadableInput(
            _optimizer_shown(files),
            f"its saved AdamW settings are not valid ({str(error).strip()[:200]})",
            _OPTIMIZER_HINT,
        ) from error
    kernel = "fused" if first.get("fused") else "foreach" if first.get("foreach") else "default"
    notes.append(f"AdamW in {rule_name}, {kernel} kernel as saved")
    return optimizer


_OPTIMIZER_HINT = (
    "Define build_optimizer(model) in the entry file, or replay the run's own checkpoint"
)


def _optimizer_shown(files: CheckpointFiles) -> str:
    """The optimizer file as the user knows it: inside the checkpoint folder, or the checkpoint
    file itself for one-file layouts (nanoGPT's ckpt.pt)."""
    name = files.optimizer_file() or "optimizer.pt"
    return name if name == files.choice.shown else f"{files.choice.shown}/{name}"


def _saved_learning_rates(saved: Mapping[str, Any], files: CheckpointFiles) -> list[float]:
    """Each saved group's lr, the group's numeric settings checked first: they are imposed on
    the optimizer (load_state_dict) whoever built it. A crafted one is refused in one line, where
    lr "abc" raised ValueError from float(), lr -1.0 torch's "Invalid learning rate", and
    betas (0.9,) a ValueError from the first optimizer step."""
    rates: list[float] = []
    for group in saved["param_groups"]:
        settings = group if isinstance(group, Mapping) else {}
        for key in ("lr", "eps", "weight_decay"):
            if key == "lr" or key in settings:
                _refuse_unless_rate(settings.get(key), f"{key}", files)
        if "betas" in settings:
            betas = settings["betas"]
            if not isinstance(betas, (tuple, list)) or len(betas) != 2:
                _refuse(f"a parameter group's betas is {str(betas)[:40]}, not a pair", files)
            for beta in betas:
                if _as_rate(beta) >= 1:
                    _refuse(f"a parameter group's betas is {str(betas)[:40]}, not in [0, 1)", files)
                _refuse_unless_rate(beta, "betas", files)
        rates.append(_as_rate(settings.get("lr")))
    return rates


def _check_saved_state(saved: Mapping[str, Any], files: CheckpointFiles) -> None:
    """Each group's ids and each parameter's state as torch wrote them, refused in one line
    otherwise: load_state_dict and the first step took a stranger's None step counter, a tuple
    moment, a float entry or a dict id, and each was a traceback from torch."""
    for group in saved["param_groups"]:
        ids = group.get("params") if isinstance(group, Mapping) else None
        if not isinstance(ids, list) or not all(is_param_id(i) for i in ids):
            _refuse("a parameter group's params is not a list of parameter ids", files)
    for key, entry in saved["state"].items():
        shown = str(key)[:40]
        if not isinstance(entry, Mapping):
            _refuse(
                f"the state of parameter {shown} is a {type(entry).__name__}, not a dict", files
            )
        if "step" in entry and step_value(entry["step"]) is None:
            _refuse(f"parameter {shown}'s step counter is {str(entry['step'])[:40]}", files)
        for name, value in entry.items():
            # Tensors, plain numbers (Adafactor keeps its RMS as a float) or None (SGD's
            # momentum_buffer without momentum).
            if value is not None and not _is_tensor_or_number(value):
                _refuse(
                    f"parameter {shown}'s {str(name)[:40]} is a {type(value).__name__}, "
                    "not a tensor",
                    files,
                )


def _is_tensor_or_number(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    )


def _eager_on_cpu(optimizer: torch.optim.Optimizer, notes: list[str]) -> None:
    """A checkpoint saved with capturable Adam (CUDA graphs) asserts its parameters are on CUDA:
    on CPU the replay steps it eagerly, which changes where the step counter lives, not the
    update."""
    grouped = [g for g in optimizer.param_groups if g.get("capturable")]
    on_cpu = all(p.device.type == "cpu" for g in grouped for p in g["params"])
    if grouped and on_cpu:
        for group in grouped:
            group["capturable"] = False
        notes.append("capturable=True saved for CUDA graphs: stepped eagerly on CPU")


def _as_rate(value: Any) -> float:
    """A saved setting as a float; NaN when it is no number (text is none even when float()
    reads it, "0.001": torch would not)."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of many values
        return math.nan


def _refuse_unless_rate(value: Any, key: str, files: CheckpointFiles) -> None:
    rate = _as_rate(value)
    if not (math.isfinite(rate) and rate >= 0):
        _refuse(f"a parameter group's {key} is {str(value)[:40]}, not a number >= 0", files)


def _refuse(problem: str, files: CheckpointFiles) -> None:
    raise UnreadableInput(_optimizer_shown(files), problem, _OPTIMIZER_HINT)


def _require_adam(saved: Mapping[str, Any], files: CheckpointFiles) -> None:
    entries = [e for e in saved["state"].values() if isinstance(e, Mapping)]
    optim = str(files.run_config.get("optim") or "")
    adam_state = all("exp_avg" in e and "exp_avg_sq" in e for e in entries)
    if not adam_state or (optim and not optim.startswith("adam")):
        kind = optim or "not Adam (no exp_avg/exp_avg_sq)"
        raise UsageError(
            f"{files.optimizer_file()}: the optimizer is {kind}; tscope rebuilds only AdamW by "
            "itself. Define build_optimizer(model) in the entry file."
        )


def _matching_groups(
    model: torch.nn.Module, saved: Mapping[str, Any], files: CheckpointFiles
) -> tuple[list[NamedParams], str]:
    """The first grouping rule whose groups have the saved sizes and moment shapes."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # The producer's own rule first; the others catch custom optimizers built like them.
    primary = _PRODUCER_RULES[files.choice.facts.parameter_groups]
    rules = sorted(_GROUP_RULES, key=lambda rule: rule[0] != primary)
    failures = []
    for rule_name, rule in rules:
        groups = rule(model, named)
        problem = _mismatch(groups, saved)
        if problem is None:
            return groups, rule_name
        failures.append(f"{rule_name}: {problem}")
    raise UsageError(
        f"{files.optimizer_file()}: no known parameter grouping matches the saved optimizer "
        f"({failures[0]}). Define build_optimizer(model) in the entry file."
    )


def _trainer_groups(model: torch.nn.Module, named: NamedParams) -> list[NamedParams]:
    """Trainer.get_decay_parameter_names (v5.24 trainer.py:1408): no decay for parameters of
    nn.LayerNorm modules and for names matching bias/layernorm/rmsnorm/norm patterns."""
    import torch

    layernorms = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}

    def decays(name: str) -> bool:
        module = name.rpartition(".")[0]
        inside_layernorm = any(
            module == ln or module.startswith(ln + ".") for ln in layernorms if ln
        )
        return not inside_layernorm and not TRAINER_NO_DECAY_PATTERN.search(name.lower())

    return [[(n, p) for n, p in named if decays(n)], [(n, p) for n, p in named if not decays(n)]]


def _nanogpt_groups(_: torch.nn.Module, named: NamedParams) -> list[NamedParams]:
    """nanoGPT configure_optimizers: matrices and embeddings decay, biases and norms do not."""
    return [[(n, p) for n, p in named if p.dim() >= 2], [(n, p) for n, p in named if p.dim() < 2]]


def _one_group(_: torch.nn.Module, named: NamedParams) -> list[NamedParams]:
    return [named]


_TRAINER_RULE = "Trainer decay/no-decay groups"
_NANOGPT_RULE = "nanoGPT dim>=2 / dim<2 groups"
# ReplayFacts.parameter_groups (the checkpoint reader's): the rule the producer's own code uses.
_PRODUCER_RULES = {"trainer": _TRAINER_RULE, "nanogpt": _NANOGPT_RULE}
_GROUP_RULES: tuple[tuple[str, GroupRule], ...] = (
    (_TRAINER_RULE, _trainer_groups),
    (_NANOGPT_RULE, _nanogpt_groups),
    ("one param group", _one_group),
)


def _mismatch(groups: list[NamedParams], saved: Mapping[str, Any]) -> str | None:
    saved_groups = saved["param_groups"]
    if len(groups) != len(saved_groups):
        groups = [g for g in groups if g]  # a custom builder may drop an empty group
    sizes = [len(g) for g in groups]
    saved_sizes = [len(g["params"]) for g in saved_groups]
    if sizes != saved_sizes:
        return f"group sizes {sizes}, saved {saved_sizes}"
    state = saved["state"]
    # Same-shaped parameters cannot be told apart; the rule's order decides them, as in Trainer.
    for group, saved_group in zip(groups, saved_groups, strict=True):
        for (name, param), index in zip(group, saved_group["params"], strict=True):
            moment = state.get(index, {}).get("exp_avg") if isinstance(state, Mapping) else None
            if moment is not None and tuple(moment.shape) != tuple(param.shape):
                return f"{name} has shape {list(param.shape)}, saved {list(moment.shape)}"
    return None


def _fresh_from_training_args(
    model: torch.nn.Module, files: CheckpointFiles, notes: list[str]
) -> torch.optim.Optimizer:
    """No optimizer state at all: the Trainer's default optimizer from TrainingArguments."""
    import torch

    args = files.run_config
    optim = str(args.get("optim") or "")
    if not files.choice.facts.training_arguments or optim not in _TORCH_ADAMW:
        raise UsageError(
            f"{files.choice.shown} holds no optimizer state to rebuild the optimizer from. "
            "Define build_optimizer(model) in the entry file."
        )
    decay, no_decay = _trainer_groups(model, [(n, p) for n, p in model.named_parameters()])
    notes.append(f"fresh AdamW from training_args ({optim})")
    try:
        return torch.optim.AdamW(
            [
                {
                    "params": [p for _, p in decay],
                    "weight_decay": float(args.get("weight_decay", 0)),
                },
                {"params": [p for _, p in no_decay], "weight_decay": 0.0},
            ],
            lr=float(args.get("learning_rate", 5e-5)),
            betas=(float(args.get("adam_beta1", 0.9)), float(args.get("adam_beta2", 0.999))),
            eps=float(args.get("adam_epsilon", 1e-8)),
            fused=optim == "adamw_torch_fused",
        )
    except (ValueError, TypeError, OverflowError) as error:
        # Decoded from a stranger's training_args.bin: learning_rate "abc" or -1 (AdamW's own
        # check) ended `tscope replay` in a traceback.
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise UsageError(
            f"{files.choice.shown}: training_args.bin holds settings AdamW refuses ({reason}). "
            "Define build_optimizer(model) in the entry file."
        ) from error
