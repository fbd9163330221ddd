"""nanoGPT checkpoints: `ckpt.pt` / `ckpt_*.pt` = {model, optimizer, model_args, iter_num,
best_val_loss, config} (karpathy/nanoGPT train.py:277-286; DOMAIN.md §A.2).

The file is loaded once with mmap through safe_torch_load, so tensors stay on disk until used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import (
    CheckpointHandle,
    LoadOptions,
    OptimizerState,
    ReplayFacts,
    TorchFileKeys,
)
from tscope.ingest.checkpoints.optimizer_mapping import (
    NANOGPT_RULES,
    map_optimizer_state,
)
from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.ingest.checkpoints.param_order import inferred_orders
from tscope.ingest.checkpoints.pickle_literals import pickle_strings
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.checkpoints.state_dict_files import (
    TensorSource,
    describe_torch_file,
    step_from_name,
)
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

# The keys that make a torch file a nanoGPT checkpoint (any one with "model").
_NANOGPT_KEYS = {"iter_num", "model_args"}


class NanoGptReader:
    name = "nanogpt"
    replay_facts = ReplayFacts(
        next_update_offset=0,  # iter_num N: saved before update N
        file_keys=TorchFileKeys(
            weights="model",
            model_args="model_args",
            run_config="config",
            optimizer="optimizer",
            scheduler=None,  # train.py computes the LR from iter_num (get_lr)
        ),
        parameter_groups="nanogpt",  # GPT.configure_optimizers
    )

    def can_open(self, path: Path) -> bool:
        """A torch zip file whose pickle names `model` and `iter_num` or `model_args`.

        The pickle's opcodes are scanned, never executed (pickle_literals.pickle_strings).
        """
        if not path.is_file() or path.suffix not in (".pt", ".pth"):
            return False
        keys = pickle_strings(path)
        return (
            keys is not None
            and "model" in keys
            and bool(keys & _NANOGPT_KEYS)
            and "pytorch-lightning_version" not in keys
        )

    def open(self, path: Path, display_path: str, options: LoadOptions) -> CheckpointHandle:
        return NanoGptCheckpoint(path, display_path, options)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        return describe_torch_file(path, display_path, self.name)


class NanoGptCheckpoint:
    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        self.partial: list[PartialInput] = []
        self._shown = display_path
        loaded = safe_torch_load(path, display_path, options)
        if not isinstance(loaded, Mapping) or not isinstance(loaded.get("model"), Mapping):
            raise UnreadableInput(display_path, "holds no `model` state dict")
        self._raw: Mapping[str, Any] = loaded
        self._source = TensorSource()
        self._source.add_state_dict(loaded["model"])
        if not self._source.order:
            raise UnreadableInput(display_path, "its `model` state dict holds no parameters")
        iter_num = loaded.get("iter_num")
        self.config: dict[str, Any] = self._mapping(loaded, "config")
        self.model_args: dict[str, Any] = self._mapping(loaded, "model_args")
        self.info = CheckpointInfo(
            step=step_value(iter_num) if isinstance(iter_num, int) else step_from_name(path.name),
            path=display_path,
            format="nanogpt",
            has_optimizer=loaded.get("optimizer") is not None,
            has_rng=False,
        )
        self._optimizer: OptimizerState | None = None
        self._mapping_note = ""

    def _mapping(self, loaded: Mapping[str, Any], key: str) -> dict[str, Any]:
        """nanoGPT's `config` or `model_args` dict; anything else a stranger put there is noted
        and read as empty (a float or a list there was a TypeError traceback)."""
        value = loaded.get(key)
        if value is None or isinstance(value, Mapping):
            return dict(value or {})
        self.partial.append(
            PartialInput(
                self._shown, f"its `{key}` is a {type(value).__name__}, not a dict: ignored"
            )
        )
        return {}

    def tensor_names(self) -> list[str]:
        return self._source.names()

    def load_tensor(self, name: str) -> torch.Tensor:
        # nanoGPT ties lm_head.weight to transformer.wte.weight; the state dict stores both
        # names on one storage and the source keeps the first.
        if name == "lm_head.weight" and name not in self._source.names():
            name = "transformer.wte.weight"
        return self._source.load(name, self._shown)

    def optimizer_state(self) -> OptimizerState | None:
        raw = self._raw.get("optimizer")
        if raw is None:
            return None
        if self._optimizer is None:
            # torch.save keeps the state dict's order, which is named_parameters() order.
            orders = [("stored state-dict order", self._source.order)]
            orders += inferred_orders(self._source.order)
            self._optimizer, self._mapping_note = map_optimizer_state(raw, orders, NANOGPT_RULES)
        return self._optimizer

    def audit(self) -> ResumeAudit:
        raw = self._raw.get("optimizer")
        summary = summarize_optimizer(raw)
        notes = list(summary.notes) if raw is not None else ["no optimizer state in the file"]
        if self.optimizer_state() is not None:
            notes.append(f"optimizer ids mapped to names: {self._mapping_note}")
        notes.append(
            "nanoGPT computes the learning rate from iter_num (get_lr): no scheduler state needed"
        )
        notes.append(
            "nanoGPT saves no RNG state: get_batch draws from the global torch RNG seeded "
            "1337 + rank, so a resume replays the batch sequence from its start"
        )
        dtype = self.config.get("dtype")
        has_scaler: bool | None = None
        if dtype == "float16":
            # train.py enables a GradScaler only for float16 and never saves it.
            has_scaler = False
            notes.append("dtype float16: the GradScaler's loss scale is not saved")
        return ResumeAudit(
            has_weights=True,
            has_optimizer_moments=raw is not None and summary.has_moments,
            has_step_counters=raw is not None and summary.has_step_counters,
            has_scheduler=True,
            has_scaler=has_scaler,
            rng_ranks=(),
            expected_ranks=None,
            has_sampler_state=None,
            notes=tuple(notes),
        )

    def close(self) -> None:
        self._source.close()
        self._raw = {}
        self._optimizer = None
