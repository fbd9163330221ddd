"""The optimizer state of a DeepSpeed checkpoint, in either of its layouts, by parameter name.

A tag folder holds one ZeRO-1/2 optimizer file per data-parallel rank
(`[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt`), whose flat partitions
deepspeed_zero rebuilds per parameter; a universal folder holds `zero/<param>/{fp32,exp_avg,
exp_avg_sq,step}.pt` and the shared `zero/optimizer_state.pt` (param groups, loss scaler). Kept
apart from deepspeed.py, which finds the checkpoint, reads the model states and its weights and
audits a resume: this module reads only the optimizer's files and maps them to the model's names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions, OptimizerState
from tscope.ingest.checkpoints.deepspeed_pickle import load_deepspeed_file
from tscope.ingest.checkpoints.deepspeed_zero import (
    FORGED_DATA_ERRORS,
    ZeroState,
    rebuild_zero_state,
)
from tscope.ingest.checkpoints.deepspeed_zero_layout import step_number
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.ingest.safe_fs import is_real_folder

if TYPE_CHECKING:
    import torch

OPTIM_STATES = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_UNIVERSAL_SLOTS = ("exp_avg", "exp_avg_sq")


def optim_files(folder: Path) -> list[Path]:
    """The ZeRO optimizer partitions of tensor-parallel rank 0, by data-parallel rank."""
    found = [(OPTIM_STATES.match(p.name), p) for p in folder.iterdir()]
    tp0 = [(int(m.group(1)), p) for m, p in found if m and int(m.group(2)) == 0]
    return [p for _, p in sorted(tp0)]


class DeepSpeedOptimizerFiles:
    """The optimizer files of one checkpoint folder, read on demand; the loss scaler they hold is
    kept for the resume audit (set when read, so a later failure does not unset it)."""

    def __init__(self, folder: Path, relative: Callable[[Path], str], options: LoadOptions) -> None:
        self._dir, self._relative, self._options = folder, relative, options
        self.loss_scaler: Any = None

    def read_zero(self, shapes: Any) -> OptimizerState | None:
        """The tag folder's ZeRO-1/2 partitions, mapped through the model's `param_shapes`."""
        files = optim_files(self._dir)
        if not files:
            return None
        rank_states = []
        for file in files:
            loaded = load_deepspeed_file(file, self._relative(file), self._options)
            inner = loaded.get("optimizer_state_dict") if isinstance(loaded, Mapping) else None
            if not isinstance(inner, Mapping):
                raise UnreadableInput(self._relative(file), "holds no optimizer_state_dict")
            rank_states.append(inner)
        if not isinstance(shapes, list):
            return OptimizerState(unmapped=["the model file has no param_shapes to map by"])
        try:
            rebuilt = rebuild_zero_state(
                rank_states, shapes, [self._relative(file) for file in files]
            )
        except FORGED_DATA_ERRORS as error:  # behind the checks in deepspeed_zero: forged data
            reason = " ".join(str(error).split())[:160]
            return OptimizerState(
                unmapped=[
                    "the optimizer files' partitions could not be rebuilt "
                    f"({type(error).__name__}: {reason}); not mapped"
                ]
            )
        return self._as_optimizer_state(rebuilt)

    def _as_optimizer_state(self, rebuilt: ZeroState) -> OptimizerState:
        state = OptimizerState(
            param_groups=rebuilt.param_groups,
            unmapped=rebuilt.unmapped,
            master_weights={
                normalize_name(k): v for k, v in rebuilt.masters.items() if isinstance(k, str)
            }
            or None,
        )
        for name, entry in rebuilt.moments.items():
            if isinstance(name, str):
                state.per_param[normalize_name(name)] = entry
        state.group_of = {
            normalize_name(k): v for k, v in rebuilt.group_of.items() if isinstance(k, str)
        }
        self.loss_scaler = rebuilt.loss_scaler
        return state

    def read_universal(self, universal_dir: Path, buffers: set[Any]) -> OptimizerState:
        """The universal folder's per-parameter files (`universal_dir` is its `zero/`)."""
        state = OptimizerState(master_weights={})
        common = universal_dir / "optimizer_state.pt"
        if common.is_file():
            loaded = load_deepspeed_file(common, self._relative(common), self._options)
            groups = loaded.get("param_groups") if isinstance(loaded, Mapping) else None
            state.param_groups = [
                {k: v for k, v in g.items() if isinstance(k, str) and k != "params"}
                for g in (groups if isinstance(groups, list) else [])
                if isinstance(g, Mapping)
            ]
            self.loss_scaler = loaded.get("loss_scaler") if isinstance(loaded, Mapping) else None
        for folder in sorted(universal_dir.iterdir()):
            if not is_real_folder(folder) or folder.name in buffers:
                continue
            name = normalize_name(folder.name)
            if (folder / "fp32.pt").is_file() and state.master_weights is not None:
                fp32 = folder / "fp32.pt"
                state.master_weights[name] = universal_tensor(
                    fp32, self._relative(fp32), self._options
                )
            if not all((folder / f"{slot}.pt").is_file() for slot in _UNIVERSAL_SLOTS):
                continue
            entry: dict[str, Any] = {
                slot: universal_tensor(
                    folder / f"{slot}.pt", self._relative(folder / f"{slot}.pt"), self._options
                )
                for slot in _UNIVERSAL_SLOTS
            }
            step_file = folder / "step.pt"
            entry["step"] = (
                step_number(universal_tensor(step_file, self._relative(step_file), self._options))
                if step_file.is_file()
                else None
            )
            state.per_param[name] = entry
            if len(state.param_groups) == 1:  # the layout does not say which group otherwise
                state.group_of[name] = 0
        return state


def universal_tensor(path: Path, shown: str, options: LoadOptions) -> torch.Tensor:
    """The tensor of a universal per-parameter file (`{"param": tensor, "cat_dim": ...}`)."""
    import torch

    loaded = load_deepspeed_file(path, shown, options)
    tensor = loaded.get("param") if isinstance(loaded, Mapping) else loaded
    if not isinstance(tensor, torch.Tensor):
        raise UnreadableInput(shown, "holds no tensor (expected {'param': tensor, ...})")
    return tensor
