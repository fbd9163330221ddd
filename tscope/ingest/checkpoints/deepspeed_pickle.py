"""DeepSpeed's pickled helper objects, loaded without DeepSpeed.

DeepSpeed optimizer files (`[bf16_]zero_pp_rank_{dp}_mp_rank_{mp}_optim_states.pt`) pickle a few
DeepSpeed objects next to the tensors: the loss scaler, the ZeRO stage enum and the
`fragment_address(numel, start)` tuples of `param_slice_mappings` (deepspeed 0.19.8). A
`weights_only` load refuses them. We allow-list them under their DeepSpeed names but bind the
names to our own plain stand-ins, so loading never imports or runs DeepSpeed code: the stand-ins
only store the values the pickle hands them. Any other global is still refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.safe_load import safe_torch_load


class ZeroStage(int):
    """Stand-in for deepspeed.runtime.zero.config.ZeroStageEnum (an int enum: 0, 1, 2, 3)."""


class PickledAttributes:
    """Stand-in for objects pickled as their attribute dict (created empty, then filled)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({vars(self)})"


class FragmentAddress(PickledAttributes):
    """Stand-in for deepspeed.utils.tensor_fragment.fragment_address (a dataclass)."""

    numel: int  # values of the parameter in this rank's partition
    start: int  # offset of the first one in the partition

    def __init__(self, numel: int = 0, start: int = 0) -> None:
        self.numel, self.start = numel, start


class LossScaler(PickledAttributes):
    """deepspeed.runtime.fp16.loss_scaler.LossScaler: `cur_scale`, `dynamic`."""


class DynamicLossScaler(PickledAttributes):
    """deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler: `cur_scale`, `cur_iter`,
    `last_overflow_iter`, `scale_factor`, `scale_window`, ..."""


class Namespace(PickledAttributes):
    """argparse.Namespace, which Megatron-DeepSpeed saves as `args` in the model states."""


STAND_INS: tuple[tuple[Any, str], ...] = (
    (ZeroStage, "deepspeed.runtime.zero.config.ZeroStageEnum"),
    (FragmentAddress, "deepspeed.utils.tensor_fragment.fragment_address"),
    (LossScaler, "deepspeed.runtime.fp16.loss_scaler.LossScaler"),
    (DynamicLossScaler, "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"),
    (Namespace, "argparse.Namespace"),
)


def load_deepspeed_file(path: Path, display_path: str, options: LoadOptions) -> Any:
    """safe_torch_load with DeepSpeed's helper classes bound to the inert stand-ins above."""
    import torch

    with torch.serialization.safe_globals(list(STAND_INS)):
        return safe_torch_load(path, display_path, options)
