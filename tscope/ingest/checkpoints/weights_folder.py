"""A checkpoint folder holding transformers-style weight files and a torch-saved optimizer.

Both the HF Trainer's `checkpoint-N/` (hf_trainer.py) and accelerate's `save_state` folders
(accelerate.py) store the weights as `model.safetensors` (its shards and index) or the legacy
`pytorch_model.bin` (+ index), and the optimizer as one torch file of `Optimizer.state_dict()`.
`WeightsFolderCheckpoint` reads those; each layout's handle adds its own side files (step, RNG,
scheduler) and its resume audit.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions, OptimizerState
from tscope.ingest.checkpoints.optimizer_mapping import (
    TRAINER_RULES,
    GroupingRule,
    aligned_order,
    map_optimizer_state,
    optimizer_ids,
)
from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.ingest.checkpoints.param_order import ParamSpec, architecture_order, inferred_orders
from tscope.ingest.checkpoints.rng_state import read_rng_state
from tscope.ingest.checkpoints.safe_load import key_text, safe_torch_load
from tscope.ingest.checkpoints.state_dict_files import TensorSource, read_json
from tscope.ingest.safe_fs import OUTSIDE_INPUT, file_identity, is_inside
from tscope.model import PartialInput

if TYPE_CHECKING:
    import torch

    from tscope.ingest.checkpoints.safetensors_header import HeaderEntry

# (index file, single file) pairs, in the order tried; then a PEFT adapter.
_WEIGHT_LAYOUTS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)
# Shards a `partial` entry each names when an index lists missing (or outside) ones; one more
# entry counts the rest.
MAX_SHARDS_NAMED = 5
# Shard files one index may name: the largest public checkpoints are split in a few hundred.
MAX_SHARD_FILES = 10_000
PEFT_ADAPTER = "adapter_model.safetensors"  # PEFT: the adapter is what the optimizer trained
WEIGHT_FILES = (*(name for pair in _WEIGHT_LAYOUTS for name in pair), PEFT_ADAPTER)
# Input embeddings an untied-on-disk `lm_head.weight` reuses when config.tie_word_embeddings.
_EMBEDDING_NAMES = (
    "wte",
    "embed_tokens",
    "word_embeddings",
    "tok_embeddings",
    "embed_in",
    "shared",
)


class OptimizerAudit(NamedTuple):
    has_weights: bool
    has_moments: bool
    has_step_counters: bool
    notes: tuple[str, ...]


class WeightsFolderCheckpoint:
    """The weights and optimizer of a checkpoint folder; subclasses name the optimizer file."""

    optimizer_files: tuple[str, ...] = ()
    grouping_rules: tuple[tuple[str, GroupingRule], ...] = TRAINER_RULES

    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        self.partial: list[PartialInput] = []
        self._dir, self._shown, self._options = path, display_path, options
        self._source = TensorSource()
        self._notes: list[str] = []
        self.config = self._json("config.json") or {}
        self._read_weights()
        self._aliases = self._tied_aliases()
        self._optimizer: OptimizerState | None = None
        self._optimizer_raw: Any = None
        self._optimizer_loaded = False
        self._untrained_names: frozenset[str] | None = None

    # --- weights ---------------------------------------------------------------------------

    def _read_weights(self) -> None:
        for index_name, single in _WEIGHT_LAYOUTS:
            if (self._dir / index_name).is_file():
                self._read_shards(index_name)
                return
            if (self._dir / single).is_file():
                self._read_file(self._dir / single)
                return
        if (self._dir / PEFT_ADAPTER).is_file():
            self._read_file(self._dir / PEFT_ADAPTER)
            self._notes.append("PEFT adapter checkpoint: only the adapter weights are stored")

    def _read_shards(self, index_name: str) -> None:
        index = self._json(index_name) or {}
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            self.partial.append(PartialInput(self._file_shown(index_name), "has no weight_map"))
            return
        # Shards are numbered in save order, so for .bin shards their concatenation keeps the
        # state dict's (registration) order.
        shards = sorted({v for v in weight_map.values() if isinstance(v, str)})
        not_names = sum(1 for v in weight_map.values() if not isinstance(v, str))
        if not_names:
            self.partial.append(
                PartialInput(
                    self._file_shown(index_name),
                    f"weight_map gives {not_names} tensor(s) a shard that is not a file name",
                )
            )
        if len(shards) > MAX_SHARD_FILES:
            # Each shard name is resolved (symlinks) and looked up: 200,000 took 22 s.
            self.partial.append(
                PartialInput(
                    self._file_shown(index_name),
                    f"weight_map names {len(shards)} shard files; tscope reads at most "
                    f"{MAX_SHARD_FILES} (the first in name order)",
                )
            )
        outside = missing = 0
        # One read per file, however the index spells it ("m.safetensors", "./m.safetensors",
        # ".//m.safetensors", a hard link): 5,000 spellings of one shard once read it 5,000
        # times and made 10,000 layer rows of its 2 tensors (red team round 8).
        read: set[tuple[int, int]] = set()
        for shard in shards[:MAX_SHARD_FILES]:
            file = self._dir / shard
            if not _names_a_file_inside(self._dir, shard):
                # An absolute or `../` name would read a file the user never gave tscope.
                outside += 1
                if outside <= MAX_SHARDS_NAMED:
                    self.partial.append(
                        PartialInput(
                            self._file_shown(index_name),
                            f"weight_map names shard {key_text(shard)!r}, {OUTSIDE_INPUT}; it is "
                            "not read",
                        )
                    )
                continue
            if not _is_file(file):
                missing += 1
                if missing <= MAX_SHARDS_NAMED:
                    self.partial.append(
                        PartialInput(
                            self._file_shown(key_text(shard)),
                            "shard listed in the index is missing",
                        )
                    )
                continue
            identity = file_identity(file)
            if identity is None or identity in read:
                continue
            read.add(identity)
            self._read_file(file)
        # One entry counts the rest: an index naming 200,000 missing shards (6.5 MB) made
        # 200,000 entries and a 22 MB case.json.
        if outside > MAX_SHARDS_NAMED:
            self.partial.append(
                PartialInput(
                    self._file_shown(index_name),
                    f"weight_map names {outside - MAX_SHARDS_NAMED} more shard(s) {OUTSIDE_INPUT}; "
                    "they are not read",
                )
            )
        if missing > MAX_SHARDS_NAMED:
            self.partial.append(
                PartialInput(
                    self._file_shown(index_name),
                    f"{missing - MAX_SHARDS_NAMED} more shard(s) listed in the index are missing",
                )
            )

    def _read_file(self, file: Path) -> None:
        shown = self._file_shown(file.name)
        try:
            if file.suffix == ".safetensors":
                self._source.add_safetensors(file, shown)
            else:
                loaded = safe_torch_load(file, shown, self._options)
                if not isinstance(loaded, dict):
                    raise UnreadableInput(shown, "holds no state dict")
                self._source.add_state_dict(loaded)
        except UnreadableInput as error:
            self.partial.append(partial_of(error))

    def _tied_aliases(self) -> dict[str, str]:
        """`lm_head.weight` left out of the file because it is the input embedding."""
        names = set(self._source.names())
        if "lm_head.weight" in names or self.config.get("tie_word_embeddings") is False:
            return {}
        for name in sorted(names):
            module = name.removesuffix(".weight").rsplit(".", 1)[-1]
            if name.endswith(".weight") and module in _EMBEDDING_NAMES:
                self._notes.append(f"lm_head.weight is tied to {name} (stored once)")
                return {"lm_head.weight": name}
        return {}

    def tensor_names(self) -> list[str]:
        untrained = self._untrained()
        return [name for name in self._source.names() if name not in untrained]

    def _untrained(self) -> frozenset[str]:
        """Stored tensors this optimizer never trained, when its state could not be named: no
        entry of it has their shape (a persistent buffer saved beside the parameters, or a tensor
        left out of the optimizer). Listed, they would read as frozen parameters."""
        if self._untrained_names is not None:
            return self._untrained_names
        self._untrained_names = frozenset()
        state = self.optimizer_state() if self._optimizer_file() is not None else None
        if state is not None and state.unmapped and not state.per_param:
            shapes = {shape for _, shape in optimizer_ids(self._optimizer_raw) if shape}
            if shapes:
                self._untrained_names = frozenset(
                    spec.name for spec in self._source.order if spec.shape not in shapes
                )
        if self._untrained_names:
            shown = ", ".join(sorted(self._untrained_names)[:3])
            self._notes.append(
                f"not analyzed: {shown}{' …' if len(self._untrained_names) > 3 else ''} (no "
                "entry of the optimizer state has their shape: buffers, or tensors the "
                "optimizer never trained)"
            )
        return self._untrained_names

    def load_tensor(self, name: str) -> torch.Tensor:
        return self._source.load(self._aliases.get(name, name), self._shown)

    def raw_location(self, name: str) -> tuple[Path, HeaderEntry] | None:
        """Where a safetensors-stored tensor's bytes are (read without torch by the scan)."""
        return self._source.raw_location(self._aliases.get(name, name))

    # --- optimizer -------------------------------------------------------------------------

    def _optimizer_file(self) -> Path | None:
        return next(
            (self._dir / f for f in self.optimizer_files if (self._dir / f).is_file()), None
        )

    def _load_optimizer(self) -> Any:
        if not self._optimizer_loaded:
            self._optimizer_loaded = True
            file = self._optimizer_file()
            if file is not None:
                try:
                    self._optimizer_raw = safe_torch_load(
                        file, self._file_shown(file.name), self._options
                    )
                except UnreadableInput as error:
                    self.partial.append(partial_of(error))
        return self._optimizer_raw

    def optimizer_state(self) -> OptimizerState | None:
        raw = self._load_optimizer()
        if raw is None:
            return None
        if self._optimizer is None:
            self._optimizer, note = map_optimizer_state(raw, self._orders(raw), self.grouping_rules)
            self._notes.append(f"optimizer ids mapped to names: {note}")
        return self._optimizer

    def _orders(self, raw_optimizer: Any) -> list[tuple[str, list[ParamSpec]]]:
        params = self._source.order
        orders: list[tuple[str, list[ParamSpec]]] = []
        declared = architecture_order(self.config, params)
        if declared is not None:
            architecture = self.config["architectures"][0]
            orders.append((f"{architecture}'s named_parameters() order", declared))
        if self._source.stored_order_is_registration:
            orders.append(("stored state-dict order", params))
        model_type = self.config.get("model_type")
        orders += inferred_orders(params, model_type if isinstance(model_type, str) else None)
        # A persistent buffer the file stores beside the parameters (a mask, a positional
        # scale) makes every order one name too long for `Optimizer(model.parameters())`: each
        # order also tried without the tensors the optimizer's shapes force out.
        aligned = []
        for name, order in orders:
            fitted = aligned_order(order, raw_optimizer)
            if fitted is not None and len(fitted) < len(order):
                aligned.append((f"{name}, buffers skipped by shape alignment", fitted))
        return orders + aligned

    # --- side files ------------------------------------------------------------------------

    def _loads(self, name: str, rng: bool = False) -> bool:
        """The file exists and loads safely; a refused or broken file goes to partial."""
        file = self._dir / name
        if not file.is_file():
            return False
        try:
            if rng:
                read_rng_state(file, self._file_shown(name), self._options)
            else:
                safe_torch_load(file, self._file_shown(name), self._options)
        except UnreadableInput as error:
            self.partial.append(partial_of(error))
            return False
        return True

    def _optimizer_audit(self, missing: str) -> OptimizerAudit:
        """What the folder's weights and optimizer file give a resume; `missing` is the note
        when there is no optimizer file."""
        raw = self._load_optimizer()
        self.optimizer_state()  # maps the optimizer's ids, noted in self._notes
        summary = summarize_optimizer(raw)
        notes = list(summary.notes) if raw is not None else []
        if self._optimizer_file() is None:
            notes.append(missing)
        return OptimizerAudit(
            has_weights=bool(self._source.order),
            has_moments=raw is not None and summary.has_moments,
            has_step_counters=raw is not None and summary.has_step_counters,
            notes=tuple(self._notes) + tuple(notes),
        )

    def _json(self, name: str) -> dict[str, Any] | None:
        file = self._dir / name
        return read_json(file, self._file_shown(name), self.partial) if file.is_file() else None

    def _file_shown(self, name: str) -> str:
        return f"{self._shown}/{name}"

    def close(self) -> None:
        self._source.close()
        self._optimizer = None
        self._optimizer_raw = None


def _is_file(file: Path) -> bool:
    """Path.is_file, false for a name the OS refuses (longer than NAME_MAX: ENAMETOOLONG)."""
    try:
        return file.is_file()
    except (OSError, ValueError):
        return False


def _names_a_file_inside(folder: Path, name: str) -> bool:
    """A relative name without `..` that resolves inside the checkpoint folder."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        return False
    return is_inside(folder, folder / relative)


def partial_of(error: UnreadableInput) -> PartialInput:
    return PartialInput(
        error.path, f"{error.problem}. {error.hint}" if error.hint else error.problem
    )
