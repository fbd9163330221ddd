"""Plain state-dict files with the step in their name (`step_1000.safetensors`, `model_500.pt`,
`epoch=1-step=200.bin`), and the lazy tensor source every file-based reader shares.

A `.pt`/`.bin` file is either a flat `{name: tensor}` dict or a training loop's own wrapper
(`{"model": ..., "optimizer": ..., "step": ...}`); both are read. Lightning `.ckpt` files,
nanoGPT's `ckpt.pt` and Hugging Face checkpoint folders have their own readers.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import CheckpointHandle, LoadOptions, OptimizerState
from tscope.ingest.checkpoints.optimizer_mapping import (
    ANY_PRODUCER_RULES,
    map_optimizer_state,
)
from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.ingest.checkpoints.param_order import ParamSpec, inferred_orders
from tscope.ingest.checkpoints.pickle_decoder import UndecodablePickle
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.checkpoints.safetensors_header import HeaderEntry, read_header, read_tensor
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.lfs_pointer import is_lfs_pointer, refuse_lfs_pointer
from tscope.ingest.safe_fs import is_regular_file, read_bytes_bounded
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

# Steps in file and folder names, most specific first: `global_step100`, `step=200`, `iter_300`,
# then a trailing number (`model_500`, `ckpt_000100`, `checkpoint-120`).
_STEP_PATTERNS = (
    re.compile(r"(?:^|[^a-z])(?:global_)?step[=_-]?(\d+)"),
    re.compile(r"(?:^|[^a-z])iter(?:ation)?s?[=_-]?(\d+)"),
    re.compile(r"[_-](\d+)$"),
)
_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")
# Files that carry a number but are not a state dict at a step (HF shards and RNG files, ...).
_NOT_A_STEP_FILE = re.compile(
    r"^(?:rng_state|random_states|optimizer|scheduler|scaler|training_args|sampler)"
    r"|-of-\d+|^(?:pytorch_model|model)\.|_optim_states|_model_states"
)
_SAFETENSORS_FLOAT = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
# Buffers that state dicts carry next to parameters; they have no optimizer state.
_BUFFER_LEAVES = {
    "masked_bias",
    "inv_freq",
    "position_ids",
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "_float_tensor",
}
# Keys under which training loops keep each part of their checkpoint dict.
MODEL_KEYS = ("model", "state_dict", "model_state_dict", "model_state", "module", "weights")
OPTIMIZER_KEYS = ("optimizer", "optimizer_state_dict", "optimizer_state", "optim")
STEP_KEYS = ("global_step", "step", "iteration", "iter_num", "iter")
SCHEDULER_KEYS = ("lr_scheduler", "scheduler", "scheduler_state_dict")
SCALER_KEYS = ("scaler", "grad_scaler", "scaler_state_dict")
RNG_KEYS = ("rng_state", "rng_states", "rng", "cpu_rng_state", "torch_rng_state")
SAMPLER_KEYS = ("sampler", "sampler_state", "dataloader", "data_loader")


def step_from_name(name: str) -> int | None:
    stem = name.lower()
    for suffix in (*_FILE_SUFFIXES, ".ckpt"):
        stem = stem.removesuffix(suffix)
    for pattern in _STEP_PATTERNS:
        match = pattern.search(stem)
        if match:
            return step_value(match.group(1))
    return None


def normalize_name(name: str) -> str:
    """Drop wrapper prefixes: torch.compile's `_orig_mod.` and DDP/DeepSpeed's `module.`."""
    name = name.replace("_orig_mod.", "")
    return name.removeprefix("module.")


def is_safetensors(path: Path) -> bool:
    """An 8-byte little-endian header length that fits the file, then a JSON object."""
    if not is_regular_file(path):  # opening a FIFO to sniff it would block forever
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(9)
        size = path.stat().st_size
    except OSError:
        return False
    if len(head) < 9:
        return False
    (header_length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and 8 + header_length <= size


def is_torch_file(path: Path) -> bool:
    """torch.save's zip format, or a legacy pickle (protocol 2+ starts with 0x80)."""
    if not is_regular_file(path):
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    return head == b"PK\x03\x04" or head[:1] == b"\x80"


def holds_statistics(entry: HeaderEntry) -> bool:
    """A safetensors tensor that gets statistics: a float parameter, not a buffer. (Remote runs
    fetch exactly these byte ranges: tscope.ingest.remote_mirror.)"""
    return entry.dtype in _SAFETENSORS_FLOAT and not _is_buffer(entry.name)


class TensorSource:
    """Named parameters from safetensors files (read one at a time) or loaded torch dicts.

    Torch files are loaded with mmap (safe_torch_load), so their tensors stay on disk until used.
    `order` keeps the stored order: torch state dicts keep module registration order; safetensors
    files are sorted by name, so `stored_order_is_registration` tells which one we have.
    """

    def __init__(self) -> None:
        # name -> (file, header entry). Each tensor is one read of its byte range: nothing stays
        # mapped, and the header is never parsed again.
        self._safetensors: dict[str, tuple[Path, HeaderEntry]] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        self.order: list[ParamSpec] = []
        self.dtypes: dict[str, str] = {}
        self.stored_order_is_registration = True

    def add_safetensors(self, path: Path, shown: str) -> dict[str, str]:
        """Index one safetensors file (its header, parsed once); returns its `__metadata__`."""
        header = read_header(path, shown)
        for entry in header.entries:
            if not holds_statistics(entry):
                continue
            name = normalize_name(entry.name)
            if name in self._safetensors or name in self._tensors:
                continue  # another shard already holds it: one tensor is counted once
            self._safetensors[name] = (path, entry)
            self.order.append(ParamSpec(name, entry.shape))
            self.dtypes[name] = entry.dtype
        self.stored_order_is_registration = False
        return header.metadata

    def add_state_dict(self, state_dict: Mapping[Any, Any]) -> None:
        """Parameters of a loaded state dict in stored order; tied duplicates kept once."""
        import torch

        seen_storage: dict[tuple[int, int, tuple[int, ...]], str] = {}
        for key, value in state_dict.items():
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                continue
            if not value.is_floating_point() or _is_buffer(key, value):
                continue
            # Tied weights (lm_head = wte) share storage; named_parameters() yields them once.
            shape = tuple(int(d) for d in value.shape)
            identity = (value.untyped_storage().data_ptr(), int(value.storage_offset()), shape)
            if value.numel() and identity in seen_storage:
                continue
            seen_storage[identity] = key
            name = normalize_name(key)
            if name in self._safetensors or name in self._tensors:
                continue  # another shard already holds it: one tensor is counted once
            self._tensors[name] = value
            self.order.append(ParamSpec(name, shape))
            self.dtypes[name] = str(value.dtype).removeprefix("torch.")

    def names(self) -> list[str]:
        return sorted(spec.name for spec in self.order)

    def load(self, name: str, shown: str) -> torch.Tensor:
        if name in self._tensors:
            return self._tensors[name]
        if name not in self._safetensors:
            raise UnreadableInput(shown, f"holds no tensor named {name}")
        path, entry = self._safetensors[name]
        return read_tensor(path, entry, shown)

    def raw_location(self, name: str) -> tuple[Path, HeaderEntry] | None:
        """(file, header entry) of a tensor stored in a safetensors file; None otherwise."""
        return None if name in self._tensors else self._safetensors.get(name)

    def close(self) -> None:
        self._safetensors.clear()
        self._tensors.clear()


def _is_buffer(key: str, value: Any = None) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    if leaf in _BUFFER_LEAVES:
        return True
    # GPT-2 / nanoGPT causal mask registered as `attn.bias`, shape (1, 1, block, block)
    return key.endswith("attn.bias") and value is not None and value.dim() == 4


def describe_torch_file(path: Path, display_path: str, format_name: str) -> CheckpointInfo:
    """A single checkpoint file described from its pickle's literals (tensors stay inert
    records: no storage is read), the step from the file's own counter, else its name."""
    top: Mapping[str, Any] = {}
    if path.suffix != ".safetensors" and not is_lfs_pointer(path):
        try:
            literals = torch_file_literals(path)
        except UndecodablePickle:
            literals = None
        top = literals if isinstance(literals, Mapping) else {}
    steps = (step_value(top.get(key)) for key in STEP_KEYS)
    step = next((s for s in steps if s is not None), None)
    optimizer_keys = (*OPTIMIZER_KEYS, "optimizer_states")  # the latter: Lightning's list
    return CheckpointInfo(
        step=step if step is not None else step_from_name(path.name),
        path=display_path,
        format=format_name,
        has_optimizer=any(top.get(key) for key in optimizer_keys),
        has_rng=count_rng(top),
    )


def count_rng(raw: Mapping[str, Any]) -> bool:
    return any(raw.get(key) is not None for key in RNG_KEYS)


class StateDictFile:
    """One plain state-dict file (see module docstring)."""

    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        self.partial: list[PartialInput] = []
        self._path, self._shown = path, display_path
        self._source = TensorSource()
        self._raw: Mapping[str, Any] = {}
        step: int | None = None
        if path.suffix == ".safetensors":
            metadata = self._source.add_safetensors(path, display_path)
            step = step_value(metadata.get("step") or metadata.get("global_step"))
        else:
            loaded = safe_torch_load(path, display_path, options)
            state_dict, self._raw = _split_wrapper(loaded, display_path)
            self._source.add_state_dict(state_dict)
            step = next((step_value(self._raw.get(k)) for k in STEP_KEYS if k in self._raw), None)
        if not self._source.order:
            raise UnreadableInput(display_path, "holds no floating-point parameter tensors")
        self.info = CheckpointInfo(
            step=step if step is not None else step_from_name(path.name),
            path=display_path,
            format="state_dict",
            has_optimizer=any(self._raw.get(k) is not None for k in OPTIMIZER_KEYS),
            has_rng=count_rng(self._raw),
        )
        self._optimizer: OptimizerState | None = None
        self._mapping_note = ""

    def tensor_names(self) -> list[str]:
        return self._source.names()

    def raw_location(self, name: str) -> tuple[Path, HeaderEntry] | None:
        return self._source.raw_location(name)

    def load_tensor(self, name: str) -> torch.Tensor:
        return self._source.load(name, self._shown)

    def _raw_optimizer(self) -> Any:
        return next((self._raw[k] for k in OPTIMIZER_KEYS if self._raw.get(k) is not None), None)

    def optimizer_state(self) -> OptimizerState | None:
        raw = self._raw_optimizer()
        if raw is None:
            return None
        if self._optimizer is None:
            orders = [("stored order", self._source.order), *inferred_orders(self._source.order)]
            self._optimizer, self._mapping_note = map_optimizer_state(
                raw, orders, ANY_PRODUCER_RULES
            )
        return self._optimizer

    def audit(self) -> ResumeAudit:
        raw = self._raw_optimizer()
        summary = summarize_optimizer(raw)
        notes = list(summary.notes) if raw is not None else ["no optimizer state in the file"]
        if self.optimizer_state() is not None:
            notes.append(f"optimizer ids mapped to names: {self._mapping_note}")
        fp16 = any(dtype in ("float16", "F16") for dtype in self._source.dtypes.values())
        has_scaler = any(self._raw.get(k) is not None for k in SCALER_KEYS) or (
            False if fp16 else None
        )
        return ResumeAudit(
            has_weights=True,
            has_optimizer_moments=summary.has_moments,
            has_step_counters=summary.has_step_counters,
            has_scheduler=any(self._raw.get(k) is not None for k in SCHEDULER_KEYS),
            has_scaler=has_scaler,
            rng_ranks=(0,) if count_rng(self._raw) else (),
            expected_ranks=None,
            has_sampler_state=True if any(k in self._raw for k in SAMPLER_KEYS) else None,
            notes=tuple(notes),
        )

    def close(self) -> None:
        self._source.close()
        self._raw = {}


def _split_wrapper(loaded: Any, shown: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(state dict, wrapper dict): a flat state dict has no wrapper."""
    import torch

    if not isinstance(loaded, Mapping):
        raise UnreadableInput(shown, f"holds a {type(loaded).__name__}, not a state dict")
    if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return loaded, {}
    for key in MODEL_KEYS:
        inner = loaded.get(key)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
            return inner, loaded
    keys = ", ".join(sorted(str(k) for k in loaded)[:8])
    raise UnreadableInput(shown, f"holds no state dict (top-level keys: {keys})")


# config.json, trainer_state.json and shard indexes are kilobytes to a few megabytes (the index
# of a sharded 405B model is ~100 kB; trainer_state.json of a long run with per-step logs ~50 MB).
MAX_SIDE_JSON_BYTES = 256 * 1024 * 1024


def read_json(path: Path, shown: str, partial: list[PartialInput]) -> dict[str, Any] | None:
    """A small JSON side file; a broken, huge, deeply nested or LFS-pointer one is noted in
    partial, not fatal."""
    try:
        refuse_lfs_pointer(path, shown)
        text = read_bytes_bounded(path, shown, MAX_SIDE_JSON_BYTES).decode("utf-8")
        loaded = json.loads(text)
    except UnreadableInput as error:
        partial.append(PartialInput(error.path, error.problem))
        return None
    except (UnicodeDecodeError, ValueError) as error:
        partial.append(PartialInput(shown, f"not readable JSON ({str(error)[:200]})"))
        return None
    except RecursionError:  # json recurses per nesting level: 1e5 `[` exhaust the stack
        partial.append(PartialInput(shown, "not readable JSON (nested too deeply)"))
        return None
    return loaded if isinstance(loaded, dict) else None


class StateDictFileReader:
    name = "state_dict"
    replay_facts = None  # a bare state dict: no optimizer step or batch position to resume

    def can_open(self, path: Path) -> bool:
        if not path.is_file() or path.suffix not in _FILE_SUFFIXES:
            return False
        if _NOT_A_STEP_FILE.search(path.name) or step_from_name(path.name) is None:
            return False
        if is_lfs_pointer(path):  # opened to be reported ("run git lfs pull"), not skipped
            return True
        return is_safetensors(path) if path.suffix == ".safetensors" else is_torch_file(path)

    def open(self, path: Path, display_path: str, options: LoadOptions) -> CheckpointHandle:
        return StateDictFile(path, display_path, options)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        return describe_torch_file(path, display_path, self.name)
