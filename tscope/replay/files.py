"""The files of one checkpoint a replay restores from, each read through the safe loaders.

Tensors and state dicts come through `safe_torch_load` (weights_only=True, numpy allowed only for
RNG state); `training_args.bin` is decoded by the ingest reader without unpickling. A Lightning
`.ckpt` (a pickle like nanoGPT's ckpt.pt) is read the same way, never with weights_only=False:
`state_dict` (the LightningModule's, so the entry's build_model returns that module or one with
the same attribute paths), `optimizer_states[0]`, `lr_schedulers[0]`, `hyper_parameters` (what
build_model receives) and `loops` (read by tscope.ingest.checkpoints.lightning). It holds no RNG
state (Lightning saves none) and no trainer settings (gradient_clip_val, precision). Nothing is
written, and nothing is read that the replay does not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints.base import LoadOptions, TorchFileKeys
from tscope.ingest.checkpoints.hf_trainer import HfTrainerCheckpoint
from tscope.ingest.checkpoints.rng_state import check_rng_state
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.replay.select import CheckpointChoice

if TYPE_CHECKING:
    import torch

_SAFE = LoadOptions(trust_pickle=False)  # replay never unpickles a stranger's objects
_OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")


class CheckpointFiles:
    """Config, weights and the resume state of one checkpoint, loaded on demand."""

    def __init__(self, choice: CheckpointChoice) -> None:
        self.choice = choice
        self._hf: HfTrainerCheckpoint | None = None
        # A one-file layout (nanoGPT's ckpt.pt, a Lightning .ckpt): one mapping, read by the
        # keys its reader declares (ReplayFacts.file_keys).
        self._file: Mapping[str, Any] | None = None
        self._keys = choice.facts.file_keys
        if choice.facts.folder_with_side_files:
            self._hf = HfTrainerCheckpoint(choice.path, choice.shown, _SAFE)
        elif self._keys is None:
            raise UsageError(f"{choice.shown}: a {choice.format} checkpoint is not replayed.")
        else:
            loaded = safe_torch_load(choice.path, choice.shown, _SAFE)
            weights_key = self._keys.weights
            if not isinstance(loaded, Mapping) or not isinstance(loaded.get(weights_key), Mapping):
                raise UnreadableInput(choice.shown, f"holds no `{weights_key}` state dict")
            self._file = loaded

    # --- what the producer recorded --------------------------------------------------------

    @property
    def model_config(self) -> dict[str, Any] | None:
        """What build_model receives: config.json (Trainer) or model_args (nanoGPT)."""
        if self._hf is not None:
            return dict(self._hf.config) if self._hf.config else None
        file, keys = self._one_file()
        args = file.get(keys.model_args)
        return dict(args) if isinstance(args, Mapping) else None

    @property
    def run_config(self) -> dict[str, Any]:
        """Training settings: TrainingArguments as plain data, or nanoGPT's saved `config`."""
        if self._hf is not None:
            return dict(self._hf.training_args or {})
        file, keys = self._one_file()
        config = file.get(keys.run_config) if keys.run_config is not None else None
        return dict(config) if isinstance(config, Mapping) else {}

    @property
    def trainer_state(self) -> dict[str, Any]:
        return dict(self._hf.trainer_state or {}) if self._hf is not None else {}

    @property
    def producer_version(self) -> str | None:
        """transformers version that wrote the checkpoint (config.json), if known."""
        version = (self.model_config or {}).get("transformers_version")
        return version if isinstance(version, str) and self._hf is not None else None

    def has(self, name: str) -> bool:
        return self.choice.facts.folder_with_side_files and (self.choice.path / name).is_file()

    # --- tensors and states ----------------------------------------------------------------

    def weights(self) -> dict[str, torch.Tensor]:
        """The model state dict on CPU, names without wrapper prefixes; tied copies stored once."""
        if self._hf is not None:
            names = self._hf.tensor_names()
            if not names:
                raise UsageError(f"{self.choice.shown} holds no model weights to replay from.")
            return {name: self._hf.load_tensor(name) for name in names}
        file, keys = self._one_file()
        weights = file[keys.weights]
        return {normalize_name(str(k)): v for k, v in weights.items()}

    def optimizer_state(self) -> Any | None:
        """The saved `Optimizer.state_dict()` (integer ids), or None when there is none."""
        if self._file is not None:
            return self._stored(self._one_file()[1].optimizer)
        file = next((f for f in _OPTIMIZER_FILES if self.has(f)), None)
        return self._load(file) if file is not None else None

    def optimizer_file(self) -> str | None:
        if self._file is not None:
            return self.choice.shown if self.optimizer_state() is not None else None
        return next((f for f in _OPTIMIZER_FILES if self.has(f)), None)

    def scheduler_state(self) -> Any | None:
        if self._file is not None:
            key = self._one_file()[1].scheduler
            return self._stored(key) if key is not None else None
        return self._load("scheduler.pt") if self.has("scheduler.pt") else None

    def _one_file(self) -> tuple[Mapping[str, Any], TorchFileKeys]:
        assert self._file is not None and self._keys is not None
        return self._file, self._keys

    def _stored(self, key: str) -> Any | None:
        """The state under `key` of a one-file checkpoint; where the layout keeps one state per
        optimizer in a list (Lightning's optimizer_states), the one state. None when absent."""
        file, keys = self._one_file()
        if not keys.states_in_lists:
            return file.get(key)
        states = file.get(key)
        if not isinstance(states, (list, tuple)) or not states:
            return None
        if len(states) > 1:
            raise UsageError(
                f"{self.choice.shown} holds {len(states)} {key}; a replay restores one optimizer "
                "(manual optimization with several is not replayed)."
            )
        return states[0]

    def scaler_state(self) -> Any | None:
        return self._load("scaler.pt") if self.has("scaler.pt") else None

    def rng_state(self) -> tuple[Mapping[str, Any] | None, str]:
        """Rank 0's RNG states and the file they came from ("" when there is none)."""
        for name in ("rng_state.pth", "rng_state_0.pth"):
            if self.has(name):
                state = self._load(name, rng=True)
                # A forged numpy dtype or key array would fail inside np.random.set_state.
                check_rng_state(state, f"{self.choice.shown}/{name}")
                return (state if isinstance(state, Mapping) else None), name
        return None, ""

    def _load(self, name: str, rng: bool = False) -> Any:
        return safe_torch_load(
            self.choice.path / name, f"{self.choice.shown}/{name}", _SAFE, allow_numpy=rng
        )

    def close(self) -> None:
        if self._hf is not None:
            self._hf.close()
        self._file = None
