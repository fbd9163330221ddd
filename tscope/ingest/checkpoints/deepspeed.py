"""DeepSpeed checkpoints: one `global_stepN/` tag folder (the run folder's `latest` names the newest),
and the universal layout `ds_to_universal` writes (`global_stepN_universal/zero/<param>/...`).

Tag folder (deepspeed 0.19.8 runtime/engine.py): `mp_rank_{mp:02d}_model_states.pt` with `module`
(the model's state dict, in the training dtype), `param_shapes` (per param group, in flat-buffer
order), `buffer_names`, `lr_scheduler`, `data_sampler`, `global_steps`, `skipped_steps` (fp16
overflow skips), `dp_world_size`, `mp_world_size`, `ds_config`; and one optimizer file per
data-parallel rank, `[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt`, whose flat
partitions deepspeed_zero turns back into per-parameter masters and moments (ZeRO-1/2).

Universal folder: `zero/<param>/{fp32,exp_avg,exp_avg_sq}.pt` (each `{"param": tensor,
"cat_dim": ...}`), `zero/<param>/step.pt` (a tensor), `zero/optimizer_state.pt` (param groups,
loss scaler) and usually a copy of the model states file.

Both layouts' optimizer files are read and mapped to parameter names in deepspeed_optimizer.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import (
    ConfinesToInput,
    LoadOptions,
    OptimizerState,
    parent_inside,
    parent_place,
)
from tscope.ingest.checkpoints.deepspeed_optimizer import (
    DeepSpeedOptimizerFiles,
    optim_files,
    universal_tensor,
)
from tscope.ingest.checkpoints.deepspeed_pickle import load_deepspeed_file
from tscope.ingest.checkpoints.pickle_literals import pickle_strings
from tscope.ingest.checkpoints.state_dict_files import normalize_name, step_from_name
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.safe_fs import is_real_folder, is_regular_file, read_bytes_bounded
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
UNIVERSAL_DIR = "zero"
UNIVERSAL_SUFFIX = "_universal"
MAX_LATEST_BYTES = 4096  # `latest` holds one tag name ("global_step1200")


class DeepSpeedReader(ConfinesToInput):
    name = "deepspeed"
    replay_facts = None

    def __init__(self, input_root: Path | None = None) -> None:
        # The input the user named. The run folder around a tag folder holds `latest` and the
        # original of a `<tag>_universal/` conversion; they are looked at only inside this root.
        # None: the opened folder is the input (nothing above it is looked at, and with no
        # input named there is no one to tell; find_checkpoints always names it).
        self._input_root = input_root

    def can_open(self, path: Path) -> bool:
        """A tag folder with model states, or a universal folder (`zero/<param>/fp32.pt`).

        A `<tag>_universal/` conversion next to its original `<tag>/` is the same checkpoint
        at the same step; only the original (the producer's own files) is claimed then.
        """
        if not path.is_dir():
            return False
        if any(MODEL_STATES.match(p.name) for p in path.iterdir() if p.is_file()):
            if (
                path.name.endswith(UNIVERSAL_SUFFIX)
                and is_real_folder(path / UNIVERSAL_DIR)
                # Given the universal folder alone, its original lies outside the input: it is
                # not looked at (nor analyzed), so this folder is the checkpoint.
                and parent_inside(self._input_root, path) is not None
            ):
                original = path.with_name(path.name.removesuffix(UNIVERSAL_SUFFIX))
                # lstat: a linked original inside the input is not followed (nor listed).
                return not (is_real_folder(original) and self.can_open(original))
            return True
        return _is_universal(path)

    def open(self, path: Path, display_path: str, options: LoadOptions) -> DeepSpeedCheckpoint:
        return DeepSpeedCheckpoint(path, display_path, options, self._input_root)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        universal = _is_universal(path)
        model_files = sorted(p for p in path.iterdir() if MODEL_STATES.match(p.name))
        # Megatron-DeepSpeed adds `rng_state` to the model states; its pickle's keys say so.
        keys = pickle_strings(model_files[0]) if model_files else None
        return CheckpointInfo(
            step=step_from_name(path.name),  # global_step{N}
            path=display_path,
            format="deepspeed_universal" if universal else self.name,
            has_optimizer=universal or bool(optim_files(path)),
            has_rng="rng_state" in (keys or set()),
        )


def _is_universal(path: Path) -> bool:
    # Linked folders are not stepped into: the files under them lie outside the input.
    zero = path / UNIVERSAL_DIR
    return is_real_folder(zero) and any(
        is_regular_file(p / "fp32.pt") for p in zero.iterdir() if is_real_folder(p)
    )


class DeepSpeedCheckpoint:
    def __init__(
        self,
        path: Path,
        display_path: str,
        options: LoadOptions,
        input_root: Path | None = None,
    ) -> None:
        self.partial: list[PartialInput] = []
        self._dir, self._shown, self._options = path, display_path, options
        self._universal = _is_universal(path)
        self._optimizer_files = DeepSpeedOptimizerFiles(path, self._relative, options)
        # The run folder holding `latest`; None when it lies outside the input (given
        # `run/global_step2` alone, `run/latest` is never opened).
        self._run_dir = parent_inside(input_root, path)
        if self._run_dir is None and input_root is not None:
            place = parent_place(path)
            self.partial.append(
                PartialInput(
                    display_path,
                    f"`{self._latest_name()}` (the tag a resume without a tag loads) beside this "
                    f"folder in {place} is not read: it lies outside the input. Point tscope at "
                    f"{place} to read it",
                )
            )
        self._states: Mapping[str, Any] = self._model_states()
        module = self._states.get("module")
        self._buffers = buffers = self._buffer_names()
        self._weights: dict[str, tuple[str, Any]] = {}  # name -> (where, key or path)
        zero3 = self._zero_stage() == 3
        if zero3 and not self._universal:
            # The model file holds empty placeholders: the weights are the fp32 masters the
            # optimizer files' partitions rebuild (deepspeed_zero), named by `param_shapes`.
            for name in _shape_names(self._states.get("param_shapes")):
                if name not in buffers:
                    self._weights[normalize_name(name)] = ("master", name)
        if isinstance(module, Mapping) and not zero3:
            import torch

            for key, value in module.items():
                if isinstance(key, str) and isinstance(value, torch.Tensor) and key not in buffers:
                    self._weights[normalize_name(key)] = ("module", key)
        elif self._universal:  # no model file: the fp32 masters are the weights
            for folder in sorted((path / UNIVERSAL_DIR).iterdir()):
                if not is_real_folder(folder) or folder.name in buffers:
                    continue
                if is_regular_file(folder / "fp32.pt"):
                    self._weights[normalize_name(folder.name)] = ("fp32", folder / "fp32.pt")
        if not self._weights and not zero3:
            raise UnreadableInput(display_path, "holds no model weights (no `module` entry)")
        step = step_value(self._states.get("global_steps"))
        self._optimizer: OptimizerState | None = None
        self._optimizer_read = False
        self._optimizer_error: UnreadableInput | None = None
        self._master_problem: str | None = None  # why ZeRO-3 weights are missing: one per file
        self.info = CheckpointInfo(
            step=step if step is not None else step_from_name(path.name),
            path=display_path,
            format="deepspeed_universal" if self._universal else "deepspeed",
            has_optimizer=self._universal or bool(optim_files(self._dir)),
            has_rng=bool(self._rng_ranks()),
        )

    # --- files ---------------------------------------------------------------------------

    def _model_states(self) -> Mapping[str, Any]:
        files = sorted(
            (p for p in self._dir.iterdir() if MODEL_STATES.match(p.name)),
            key=lambda p: tuple(int(g or 0) for g in MODEL_STATES.match(p.name).groups()),  # type: ignore[union-attr]
        )
        if not files:
            return {}
        mp_ranks = {MODEL_STATES.match(p.name).group(2) for p in files}  # type: ignore[union-attr]
        if len(mp_ranks) > 1:
            self.partial.append(
                PartialInput(
                    self._shown,
                    f"{len(mp_ranks)} tensor-parallel ranks: only mp_rank_00's shard is read",
                )
            )
        try:
            loaded = load_deepspeed_file(files[0], f"{self._shown}/{files[0].name}", self._options)
        except UnreadableInput as error:
            if not self._universal:
                raise
            self.partial.append(PartialInput(error.path, error.problem_text))
            return {}
        if not isinstance(loaded, Mapping):
            raise UnreadableInput(f"{self._shown}/{files[0].name}", "not a DeepSpeed model file")
        return loaded

    def _buffer_names(self) -> set[str]:
        """`buffer_names`: the module's entries that are buffers, not parameters."""
        listed = self._states.get("buffer_names")
        if listed is None:
            return set()
        names = listed if isinstance(listed, (list, tuple)) else []
        buffers = {name for name in names if isinstance(name, str)}
        others = sum(1 for name in names if not isinstance(name, str))
        if others or not isinstance(listed, (list, tuple)):
            self.partial.append(
                PartialInput(
                    self._shown,
                    "buffer_names is not a list of names: "
                    + (
                        f"its {others} other entries are ignored"
                        if others
                        else "no entry is told apart as a buffer"
                    ),
                )
            )
        return buffers

    def _zero_stage(self) -> int | None:
        config = self._states.get("ds_config")
        zero = config.get("zero_optimization") if isinstance(config, Mapping) else None
        return _int(zero.get("stage")) if isinstance(zero, Mapping) else None

    def _fp16(self) -> bool:
        config = self._states.get("ds_config")
        fp16 = config.get("fp16") if isinstance(config, Mapping) else None
        enabled = fp16.get("enabled") if isinstance(fp16, Mapping) else None
        # A plain JSON value; anything else (a tensor) is not read as a switch.
        return isinstance(enabled, (bool, int, float, str)) and bool(enabled)

    def _rng_ranks(self) -> tuple[int, ...]:
        # The engine saves no RNG; Megatron-DeepSpeed adds a per-rank list as `rng_state`.
        saved = self._states.get("rng_state")
        return tuple(range(len(saved))) if isinstance(saved, list) else ()

    # --- the handle ----------------------------------------------------------------------

    def tensor_names(self) -> list[str]:
        return sorted(self._weights)

    def load_tensor(self, name: str) -> torch.Tensor:
        where = self._weights.get(name)
        if where is None:
            raise UnreadableInput(self._shown, f"holds no tensor named {name}")
        kind, source = where
        if kind == "module":
            tensor: torch.Tensor = self._states["module"][source]
            return tensor
        if kind == "master":
            state = self.optimizer_state()
            masters = state.master_weights if state is not None else None
            master: torch.Tensor | None = masters.get(name) if masters else None
            if master is None:
                # The same words for every parameter: the case lists the reason once per file,
                # not once per tensor (a forged param_shapes may name hundreds of thousands).
                raise UnreadableInput(self._shown, self._missing_masters(state))
            return master
        return universal_tensor(source, self._relative(source), self._options)

    def optimizer_state(self) -> OptimizerState | None:
        """Read once; an unreadable optimizer file raises the same UnreadableInput every time."""
        if self._optimizer_error is not None:
            raise self._optimizer_error
        if not self._optimizer_read:
            try:
                self._optimizer = self._read_universal() if self._universal else self._read_zero()
            except UnreadableInput as error:
                self._optimizer_error = error
                raise
            self._optimizer_read = True
        return self._optimizer

    def _missing_masters(self, state: OptimizerState | None) -> str:
        if self._master_problem is None:
            masters = state.master_weights if state is not None else None
            listed = [name for name, (kind, _) in self._weights.items() if kind == "master"]
            missing = sum(1 for name in listed if not masters or name not in masters)
            self._master_problem = (
                "ZeRO-3 keeps the weights only in the optimizer files' partitions, and "
                f"{missing} of the {len(listed)} parameters could not be rebuilt"
                + (f" ({state.unmapped[0]})" if state and state.unmapped else "")
            )
        return self._master_problem

    def _read_zero(self) -> OptimizerState | None:
        return self._optimizer_files.read_zero(self._states.get("param_shapes"))

    def _read_universal(self) -> OptimizerState:
        return self._optimizer_files.read_universal(self._dir / UNIVERSAL_DIR, self._buffers)

    def _relative(self, path: Path) -> str:
        return f"{self._shown}/{path.relative_to(self._dir).as_posix()}"

    def audit(self) -> ResumeAudit:
        notes = []
        skipped = _int(self._states.get("skipped_steps"))
        if skipped is not None and skipped > 0:
            total = self.info.step
            notes.append(
                f"DeepSpeed skipped {skipped} optimizer step(s)"
                + (f" of {total}" if total is not None else "")
                + " on fp16 overflow (loss scale halved each time)"
            )
        if self._universal:
            notes.append("universal checkpoint (ds_to_universal): per-parameter optimizer files")
        notes.extend(self._latest_note())
        rng = self._rng_ranks()
        if not rng:
            notes.append("DeepSpeed's engine saves no RNG state (python, numpy, torch, CUDA)")
        try:
            state = self.optimizer_state()
        except UnreadableInput as error:  # the caller records it as partial when it asks
            notes.append(f"optimizer state unreadable: {error.path}: {error.problem}")
            state = None
        if state is not None:
            notes.extend(state.unmapped)
        moments = state.per_param if state is not None else {}
        has_scaler: bool | None = None
        if self._fp16():
            has_scaler = self._optimizer_files.loss_scaler is not None
        dp = _int(self._states.get("dp_world_size"))
        mp = _int(self._states.get("mp_world_size"))
        return ResumeAudit(
            has_weights=bool(self._weights),
            has_optimizer_moments=bool(moments)
            and all("exp_avg" in e and "exp_avg_sq" in e for e in moments.values()),
            has_step_counters=bool(moments)
            and all(e.get("step") is not None for e in moments.values()),
            has_scheduler=self._states.get("lr_scheduler") is not None,
            has_scaler=has_scaler,
            rng_ranks=rng,
            expected_ranks=dp * mp if dp and mp and dp > 0 and mp > 0 else None,
            has_sampler_state=self._states.get("data_sampler") is not None,
            notes=tuple(notes),
        )

    def _latest_note(self) -> list[str]:
        """`load_checkpoint(dir)` without a tag resumes from the tag named in `latest`
        (`latest_universal` with universal loading): say when that is another checkpoint."""
        if self._run_dir is None:  # outside the input: listed in partial, never opened
            return []
        marker = self._run_dir / self._latest_name()
        try:
            # Through safe_fs: a `latest` linked to ~/.ssh/id_rsa once had its first 80
            # characters quoted in the case, and a FIFO named `latest` blocked the read forever.
            raw = read_bytes_bounded(marker, marker.name, MAX_LATEST_BYTES)
        except UnreadableInput:
            return []
        latest = raw.decode("utf-8", errors="replace").strip()
        if not latest or latest == self._dir.name:
            return []
        return [f"`{marker.name}` names {latest[:80]}: a resume without a tag loads that one"]

    def _latest_name(self) -> str:
        return "latest_universal" if self._universal else "latest"

    def close(self) -> None:
        self._states = {}
        self._weights = {}
        self._optimizer = None


def _shape_names(param_shapes: Any) -> list[str]:
    """The parameter names of the model file's `param_shapes` (one mapping per param group)."""
    groups = param_shapes if isinstance(param_shapes, list) else []
    return [
        name
        for group in groups
        if isinstance(group, Mapping)
        for name in group
        if isinstance(name, str)
    ]


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError, RuntimeError):  # inf, NaN, tensors too
        return None
