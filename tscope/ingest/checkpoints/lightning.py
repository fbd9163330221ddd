"""PyTorch Lightning `.ckpt` files (`epoch=E-step=S.ckpt`, `last.ckpt`): one torch zip file.

Keys (lightning 2.6 trainer/connectors/checkpoint_connector.py:416-495): `epoch`, `global_step`,
`state_dict`, `loops`, `callbacks`, `optimizer_states` (one `Optimizer.state_dict()` per
optimizer), `lr_schedulers`, the precision plugin's state under its class name (`MixedPrecision`
holds the GradScaler), `hyper_parameters`. No global RNG state is saved, and the fit loop holds
the dataloader position only when the dataloader itself is stateful (`combined_loader`).

The file is loaded once with mmap (safe_torch_load), so tensors stay on disk until read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import (
    ConfinesToInput,
    LoadOptions,
    OptimizerState,
    ReplayFacts,
    TorchFileKeys,
    parent_inside,
)
from tscope.ingest.checkpoints.optimizer_mapping import (
    GroupingRule,
    aligned_order,
    map_optimizer_state,
    nanogpt_groups,
    trainer_groups,
)
from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.ingest.checkpoints.param_order import ParamSpec
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.checkpoints.state_dict_files import (
    describe_torch_file,
    normalize_name,
    step_from_name,
)
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

ZIP_MAGIC = b"PK\x03\x04"
LAST_CHECKPOINT = re.compile(r"^last(?:-v\d+)?\.ckpt$")  # ModelCheckpoint.CHECKPOINT_NAME_LAST
# Buffers Lightning modules commonly hold next to parameters (BatchNorm statistics): never in an
# optimizer. Other buffers are found by aligning the optimizer's shapes (see `_aligned_order`).
_KNOWN_BUFFER_LEAVES = frozenset({"running_mean", "running_var", "num_batches_tracked"})
# Older Lightning (< 1.6) kept the AMP scaler under this key instead of the plugin's class name.
_LEGACY_SCALER_KEY = "native_amp_scaling_state"
NO_RNG_NOTE = (
    "Lightning saves no global RNG state (python, numpy, torch): a resume draws new randomness "
    "(dropout, shuffling seeded from the global generator)"
)
NO_SAMPLER_NOTE = (
    "the fit loop holds no dataloader state (the dataloader is not stateful): a resume "
    "mid-epoch restarts the epoch's data order and replays batches already trained on"
)


class LightningReader(ConfinesToInput):
    name = "lightning"
    # step=N.ckpt holds N finished updates, and the loggers number the next batch N.
    replay_facts = ReplayFacts(
        next_update_offset=0,
        file_keys=TorchFileKeys(
            weights="state_dict",  # the LightningModule's
            model_args="hyper_parameters",
            run_config=None,  # the Trainer's settings are not saved (hyper_parameters are the model's)
            optimizer="optimizer_states",
            scheduler="lr_schedulers",
            states_in_lists=True,
        ),
    )

    def __init__(self, input_root: Path | None = None) -> None:
        # The input the user named: a last.ckpt is compared with the .ckpt files beside it only
        # when they lie inside this root. None: the opened file is the input.
        self._input_root = input_root

    def can_open(self, path: Path) -> bool:
        """A `.ckpt` file in torch's zip format (Lightning's FSDP/DeepSpeed `.ckpt/` folders are
        other layouts), except a `last.ckpt` that repeats a sibling `...step=N.ckpt`."""
        if path.suffix != ".ckpt" or not path.is_file():
            return False
        try:
            with path.open("rb") as handle:
                if handle.read(4) != ZIP_MAGIC:
                    return False
        except OSError:
            return False
        # Named alone, a last.ckpt is the whole input: the files beside it are not listed (they
        # lie outside it), and nothing there can repeat it in this analysis.
        folder = parent_inside(self._input_root, path)
        return folder is None or not _repeats_a_sibling(path, folder)

    def open(self, path: Path, display_path: str, options: LoadOptions) -> LightningCheckpoint:
        return LightningCheckpoint(path, display_path, options)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        return describe_torch_file(path, display_path, self.name)


class LightningCheckpoint:
    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        self.partial: list[PartialInput] = []
        self._shown = display_path
        raw = safe_torch_load(path, display_path, options)
        if not isinstance(raw, Mapping) or not isinstance(raw.get("state_dict"), Mapping):
            raise UnreadableInput(display_path, "not a Lightning checkpoint (no `state_dict`)")
        self._raw: Mapping[str, Any] = raw
        self._tensors = _tensor_entries(raw["state_dict"])  # raw key -> tensor, stored order
        self._names = _normalized_names(list(self._tensors))  # raw key -> normalized name
        self._by_name = {name: key for key, name in self._names.items()}
        optimizers = raw.get("optimizer_states")
        self._optimizers: list[Any] = optimizers if isinstance(optimizers, list) else []
        self._mapped: OptimizerState | None = None
        step = step_value(raw.get("global_step"))
        if step is None:
            step = step_from_name(path.name)
        self.info = CheckpointInfo(
            step=step,
            path=display_path,
            format="lightning",
            has_optimizer=bool(self._optimizers),
            has_rng=False,
        )

    def tensor_names(self) -> list[str]:
        """Parameters. Once the optimizer state is mapped, state_dict entries the optimizer does
        not hold are buffers (positional tables, masks): they never train, and listing them
        would read as frozen parameters. Unmapped, every tensor is listed."""
        state = self.optimizer_state()
        if state is not None and state.group_of and not state.unmapped:
            return sorted(name for name in self._by_name if name in state.group_of)
        return sorted(self._by_name)

    def load_tensor(self, name: str) -> torch.Tensor:
        key = self._by_name.get(name)
        if key is None:
            raise UnreadableInput(self._shown, f"holds no tensor named {name}")
        return self._tensors[key]

    def optimizer_state(self) -> OptimizerState | None:
        if not self._optimizers:
            return None
        if self._mapped is None:  # mapped once: tensor_names() needs it too
            self._mapped = (
                self._several_optimizers()
                if len(self._optimizers) > 1
                else self._map(self._optimizers[0], index=0)
            )
        return self._mapped

    def _map(self, raw_optimizer: Any, index: int) -> OptimizerState:
        # Everything is matched in the producer's own key space (param_names carry the module
        # attribute prefix too), then renamed to the normalized names tensor_names() gives.
        candidates = _parameter_candidates(self._tensors)
        orders: list[tuple[str, Sequence[ParamSpec]]] = [("state_dict order", candidates)]
        aligned = _aligned_order(self._tensors, raw_optimizer)
        if aligned is not None and aligned != candidates:
            orders.append(("state_dict order, buffers skipped by shape alignment", aligned))
        # configure_optimizers is user code: groups in module order (the common case, and one
        # group from parameters()), or the two decay splits people copy from nanoGPT and the Trainer.
        rules: list[tuple[str, GroupingRule]] = [
            ("param groups in module order", _in_order_groups(raw_optimizer)),
            ("nanoGPT dim>=2 / dim<2 groups", nanogpt_groups),
            ("Trainer decay/no-decay groups", trainer_groups),
        ]
        state, _how = map_optimizer_state(raw_optimizer, orders, rules)
        state.per_param = {self._rename(k): v for k, v in state.per_param.items()}
        state.group_of = {self._rename(k): v for k, v in state.group_of.items()}
        if index:
            state.unmapped = [f"optimizer {index}: {line}" for line in state.unmapped]
        return state

    def _several_optimizers(self) -> OptimizerState:
        """GANs and manual optimization: each optimizer owns a subset, named only by param_names."""
        merged = OptimizerState()
        for index, raw_optimizer in enumerate(self._optimizers):
            groups = (
                raw_optimizer.get("param_groups") if isinstance(raw_optimizer, Mapping) else None
            )
            named = isinstance(groups, list) and all(
                isinstance(g, Mapping) and isinstance(g.get("param_names"), list) for g in groups
            )
            if not named:
                merged.unmapped.append(
                    f"optimizer {index} of {len(self._optimizers)}: no param_names, and which "
                    "parameters each optimizer owns is user code; not mapped"
                )
                continue
            state = self._map(raw_optimizer, index)
            offset = len(merged.param_groups)
            merged.per_param.update(state.per_param)
            merged.group_of.update({k: v + offset for k, v in state.group_of.items()})
            merged.param_groups.extend(state.param_groups)
            merged.unmapped.extend(state.unmapped)
        return merged

    def _rename(self, key: str) -> str:
        return self._names.get(key, normalize_name(key))

    def audit(self) -> ResumeAudit:
        summaries = [summarize_optimizer(o) for o in self._optimizers]
        notes = [NO_RNG_NOTE]
        for summary in summaries:
            notes.extend(summary.notes)
        has_sampler = _has_loader_state(self._raw.get("loops"))
        if not has_sampler:
            notes.append(NO_SAMPLER_NOTE)
        schedulers = self._raw.get("lr_schedulers")
        return ResumeAudit(
            has_weights=bool(self._tensors),
            has_optimizer_moments=bool(summaries) and all(s.has_moments for s in summaries),
            has_step_counters=bool(summaries) and all(s.has_step_counters for s in summaries),
            has_scheduler=isinstance(schedulers, list) and bool(schedulers),
            has_scaler=True if _scaler_state(self._raw) is not None else None,
            rng_ranks=(),
            expected_ranks=None,
            has_sampler_state=has_sampler,
            notes=tuple(notes),
        )

    def close(self) -> None:
        self._tensors = {}
        self._raw = {}
        self._optimizers = []
        self._mapped = None


def _repeats_a_sibling(path: Path, folder: Path) -> bool:
    """`save_last=True` writes last.ckpt (or last-v1.ckpt) at the same step as the newest
    `epoch=E-step=S.ckpt`: one checkpoint twice, which would read as zero movement between
    them. Its step is read from the pickle's literals (decoded, never executed; a few kB, the
    tensors are separate records); a last.ckpt past every named one is kept: it may be the only
    checkpoint after a spike."""
    if not LAST_CHECKPOINT.match(path.name):
        return False
    literals = torch_file_literals(path)
    step = step_value(literals.get("global_step")) if isinstance(literals, Mapping) else None
    if step is None:
        return False
    return any(
        sibling != path and step_from_name(sibling.name) == step
        for sibling in folder.glob("*.ckpt")
    )


def _tensor_entries(state_dict: Mapping[Any, Any]) -> dict[str, torch.Tensor]:
    import torch

    return {
        key: value
        for key, value in state_dict.items()
        if isinstance(key, str) and isinstance(value, torch.Tensor)
    }


def _normalized_names(keys: list[str]) -> dict[str, str]:
    """raw key -> name without wrappers and without the LightningModule attribute (`model.`).

    The attribute prefix is dropped only when every key carries the same one and dropping it
    keeps names distinct; a module with several top-level attributes keeps its full names.
    """
    names = {key: normalize_name(key) for key in keys}
    firsts = {name.split(".", 1)[0] for name in names.values()}
    if len(firsts) == 1 and all("." in name for name in names.values()):
        stripped = {key: name.split(".", 1)[1] for key, name in names.items()}
        stripped = {key: normalize_name(name) for key, name in stripped.items()}
        if len(set(stripped.values())) == len(stripped):
            return stripped
    return names


def _parameter_candidates(tensors: Mapping[str, torch.Tensor]) -> list[ParamSpec]:
    """state_dict entries that can be parameters, in stored (module registration) order."""
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    out = []
    for key, value in tensors.items():
        if not value.is_floating_point() or key.rsplit(".", 1)[-1] in _KNOWN_BUFFER_LEAVES:
            continue
        shape = tuple(int(d) for d in value.shape)
        # Tied weights share storage and appear once in named_parameters().
        identity = (value.untyped_storage().data_ptr(), int(value.storage_offset()), shape)
        if value.numel() and identity in seen:
            continue
        seen.add(identity)
        out.append(ParamSpec(key, shape))
    return out


def _aligned_order(
    tensors: Mapping[str, torch.Tensor], raw_optimizer: Any
) -> list[ParamSpec] | None:
    """The parameters, when the optimizer's ids (in module order) fit the state_dict one way only
    (optimizer_mapping.aligned_order), running statistics left out first."""
    candidates = [
        spec
        for spec in _parameter_candidates(tensors)
        if spec.name.rsplit(".", 1)[-1] not in _KNOWN_BUFFER_LEAVES
    ]
    return aligned_order(candidates, raw_optimizer)


def _in_order_groups(raw_optimizer: Any) -> GroupingRule:
    """The optimizer's groups as consecutive runs of the module order (sizes from the file)."""
    groups = raw_optimizer.get("param_groups") if isinstance(raw_optimizer, Mapping) else None
    # A stranger's `params` may be anything but a list (-1 was a TypeError): counted as empty.
    sizes = [
        len(ids) if isinstance(ids := g.get("params"), list) else 0
        for g in groups or []
        if isinstance(g, Mapping)
    ]

    def rule(params: Sequence[ParamSpec]) -> list[list[str]]:
        names = [p.name for p in params]
        if sum(sizes) != len(names):
            return [names]  # the mapper reports the size mismatch
        out, start = [], 0
        for size in sizes:
            out.append(names[start : start + size])
            start += size
        return out

    return rule


def _scaler_state(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The GradScaler state under the precision plugin's class name (`MixedPrecision`, ...)."""
    for key, value in raw.items():
        if (
            isinstance(key, str)
            and (key.endswith("Precision") or key == _LEGACY_SCALER_KEY)
            and isinstance(value, Mapping)
            and "scale" in value
        ):
            return value
    return None


def _has_loader_state(loops: Any) -> bool:
    fit_loop = loops.get("fit_loop") if isinstance(loops, Mapping) else None
    own_state = fit_loop.get("state_dict") if isinstance(fit_loop, Mapping) else None
    return isinstance(own_state, Mapping) and bool(own_state.get("combined_loader"))
