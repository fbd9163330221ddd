"""The streaming statistics engine across checkpoints: planted updates, deltas, Adam state,
layers.parquet and the real Trainer fixtures (one tensor's statistics are
tests/test_tensor_stats.py).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import OptimizerState
from tscope.ingest.checkpoints.stats.layers import collect_layers, read_layers_parquet
from tscope.ingest.checkpoints.stats.tensor import (
    LOG_HISTOGRAM_BINS,
)
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import LAYER_COLUMNS, ResumeAudit
from tscope.output_writer import write_layers_parquet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"


@dataclass
class FakeCheckpoint:
    """A CheckpointHandle over in-memory tensors that checks the engine streams them.

    Every load hands out a fresh copy and fails the test if a tensor loaded earlier from this
    checkpoint is still alive: at most one tensor per checkpoint may be held at a time.
    """

    step: int | None
    tensors: dict[str, torch.Tensor]
    optimizer: OptimizerState | None = None
    unreadable: set[str] = field(default_factory=set)
    optimizer_error: bool = False
    partial: list[PartialInput] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    _alive: list[weakref.ref[torch.Tensor]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.info = CheckpointInfo(
            step=self.step, path=f"checkpoint-{self.step}", format="fake", has_optimizer=False,
            has_rng=False,
        )  # fmt: skip

    def tensor_names(self) -> list[str]:
        return sorted(self.tensors)

    def load_tensor(self, name: str) -> torch.Tensor:
        if name in self.unreadable:
            raise UnreadableInput(f"{self.info.path}/model.safetensors", f"{name} is truncated")
        held = [ref for ref in self._alive if ref() is not None]
        assert not held, f"{self.info.path}: {name} loaded while another tensor is still held"
        self.loads.append(name)
        tensor = self.tensors[name].clone()
        self._alive = [weakref.ref(tensor)]
        return tensor

    def optimizer_state(self) -> OptimizerState | None:
        if self.optimizer_error:
            raise UnreadableInput(f"{self.info.path}/optimizer.pt", "it holds pickled objects")
        return self.optimizer

    def audit(self) -> ResumeAudit:
        return ResumeAudit(True, False, False, False, None, (), None, None)

    def close(self) -> None:
        pass


def planted_run(factor_on_b: float = 10.0) -> tuple[FakeCheckpoint, FakeCheckpoint]:
    """Two checkpoints 100 steps apart; every tensor moves by 1e-3 of its norm, `b` by 10×."""
    generator = torch.Generator().manual_seed(4)
    before = {
        name: torch.randn(shape, generator=generator) * 0.02
        for name, shape in (("a", (64, 32)), ("b", (128,)), ("c", (16, 16, 4)))
    }
    after = {}
    for name, weights in before.items():
        direction = torch.randn(weights.shape, generator=generator)
        step = direction / direction.norm() * weights.norm() * 1e-3
        after[name] = weights + step * (factor_on_b if name == "b" else 1.0)
    after["new_head"] = torch.ones(8)
    return FakeCheckpoint(100, before), FakeCheckpoint(200, after)


def test_a_planted_10x_update_shows_as_a_10x_update_ratio_on_that_tensor_only():
    first, second = planted_run()
    layers = collect_layers([first, second], workers=2, chunk_elements=512)
    ratio = layers.set_index(["step", "tensor"])["update_ratio_per_step"]
    assert ratio.loc[(200, "a")] == pytest.approx(1e-3 / 100, rel=1e-5)  # fp32 rounding
    assert ratio.loc[(200, "c")] == pytest.approx(1e-3 / 100, rel=1e-5)
    assert ratio.loc[(200, "b")] / ratio.loc[(200, "a")] == pytest.approx(10.0, rel=1e-5)
    assert ratio.loc[100].isna().all()  # the first checkpoint has nothing to compare with
    assert math.isnan(ratio.loc[(200, "new_head")])  # a tensor that appears has no delta
    row = layers.set_index(["step", "tensor"]).loc[(200, "a")]
    assert row["delta_source"] == "weights_fp32"
    w_prev, w_now = first.tensors["a"].double(), second.tensors["a"].double()
    assert row["delta_norm"] == pytest.approx(float((w_now - w_prev).norm()), rel=1e-12)
    expected_growth = float(w_now.norm() / w_prev.norm()) ** (1 / 100) - 1
    assert row["norm_growth_rate"] == pytest.approx(expected_growth, rel=1e-9, abs=1e-15)


def test_checkpoints_are_streamed_one_tensor_at_a_time_current_then_previous():
    first, second = planted_run()
    collect_layers([first, second])  # the fake fails if two tensors of one checkpoint coexist
    assert first.loads == ["a", "b", "c", "a", "b", "c"]  # its own pass, then each delta
    assert second.loads == ["a", "b", "c", "new_head"]


def test_table_has_exactly_the_layer_columns_one_row_per_checkpoint_and_tensor():
    first, second = planted_run()
    messages: list[str] = []
    layers = collect_layers([first, second], progress=messages.append)
    assert tuple(layers.columns) == LAYER_COLUMNS
    assert list(zip(layers["step"], layers["tensor"], strict=True)) == [
        (100, "a"), (100, "b"), (100, "c"), (200, "a"), (200, "b"), (200, "c"), (200, "new_head"),
    ]  # fmt: skip
    assert layers["checkpoint"].iloc[0] == "checkpoint-100"
    assert str(layers["step"].dtype) == "Int64" and layers["numel"].dtype == np.int64
    assert len(messages) == 7 and "checkpoint-200: new_head (4/4)" in messages
    assert layers["delta_source"].iloc[0] is None
    assert layers["exp_avg_norm"].isna().all()  # no optimizer state anywhere


def test_bf16_weight_diffs_overstate_small_updates_and_master_weights_do_not():
    generator = torch.Generator().manual_seed(5)
    master_before = torch.randn(100_000, generator=generator) * 0.02
    # A true relative change of 1e-5 per element, far below one bf16 ulp (~4e-3 of |w|).
    master_after = master_before * (1 + 1e-5 * torch.randn(100_000, generator=generator))
    before64, after64 = master_before.double(), master_after.double()
    true_ratio = float((after64 - before64).norm() / before64.norm()) / 10

    def checkpoint(step: int, master: torch.Tensor, with_master: bool) -> FakeCheckpoint:
        optimizer = OptimizerState(master_weights={"w": master}) if with_master else None
        return FakeCheckpoint(step, {"w": master.to(torch.bfloat16)}, optimizer)

    from_bf16 = collect_layers([checkpoint(10, master_before, False),
                                checkpoint(20, master_after, False)])  # fmt: skip
    from_master = collect_layers([checkpoint(10, master_before, True),
                                  checkpoint(20, master_after, True)])  # fmt: skip
    assert from_bf16["delta_source"].iloc[1] == "weights_bf16"
    assert from_master["delta_source"].iloc[1] == "fp32_master"
    assert from_master["update_ratio_per_step"].iloc[1] == pytest.approx(true_ratio, rel=1e-6)
    assert from_bf16["update_ratio_per_step"].iloc[1] > 5 * true_ratio


def test_nan_weights_have_no_delta_but_keep_their_count():
    first, second = planted_run()
    second.tensors["a"][0, 0] = float("nan")
    layers = collect_layers([first, second]).set_index(["step", "tensor"])
    assert layers.loc[(200, "a"), "nonfinite_count"] == 1
    assert math.isnan(layers.loc[(200, "a"), "delta_norm"])
    assert math.isfinite(layers.loc[(200, "b"), "delta_norm"])


def test_unreadable_tensors_and_optimizer_files_go_to_partial_and_the_rest_is_analyzed():
    first, second = planted_run()
    second.unreadable = {"b"}
    second.optimizer_error = True
    second.tensors["rotary"] = torch.ones(4, dtype=torch.complex64)
    layers = collect_layers([first, second])
    assert list(layers.loc[layers["step"] == 200, "tensor"]) == ["a", "c", "new_head"]
    problems = [p.problem for p in second.partial]
    assert any("b is truncated" in p for p in problems)
    assert any("pickled objects" in p for p in problems)
    assert any("complex tensor" in p for p in problems)


def test_the_worker_threads_leave_torchs_thread_setting_as_they_found_it():
    before = torch.get_num_threads()
    collect_layers(list(planted_run()), workers=2)
    assert torch.get_num_threads() == before


def adam_checkpoint(eps: float = 1e-8, step: float = 10.0) -> tuple[FakeCheckpoint, np.ndarray]:
    """Moments built so that √v̂ is a known multiple of ε and m̂ a known value per coordinate."""
    beta1, beta2 = 0.9, 0.999
    sqrt_v_hat = np.array([0.5, 0.9, 2.0, 10.0, 100.0, 0.1, 3.0, 0.99]) * eps  # 4 of 8 <= ε
    m_hat = np.array([1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0]) * eps
    exp_avg = torch.tensor(m_hat * (1 - beta1**step), dtype=torch.float32)
    exp_avg_sq = torch.tensor(sqrt_v_hat**2 * (1 - beta2**step), dtype=torch.float32)
    optimizer = OptimizerState(
        per_param={"w": {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq, "step": torch.tensor(step)}},
        param_groups=[{"lr": 1e-3, "eps": eps, "betas": (beta1, beta2)}],
        group_of={"w": 0},
    )
    update = m_hat / (sqrt_v_hat + eps)
    return FakeCheckpoint(int(step), {"w": torch.zeros(8)}, optimizer), update


def test_eps_dominance_and_update_rms_from_hand_made_moments():
    checkpoint, update = adam_checkpoint()
    row = collect_layers([checkpoint]).iloc[0]
    state = checkpoint.optimizer.per_param["w"]  # type: ignore[union-attr]
    assert row["eps_dominance"] == 4 / 8
    assert row["update_rms"] == pytest.approx(float(np.sqrt(np.mean(update**2))), rel=1e-5)
    assert row["adam_step"] == 10.0
    assert row["exp_avg_norm"] == pytest.approx(float(state["exp_avg"].double().norm()))
    assert row["exp_avg_sq_norm"] == pytest.approx(float(state["exp_avg_sq"].double().norm()))


def test_a_larger_eps_dominates_more_coordinates_through_the_parameter_group():
    checkpoint, _ = adam_checkpoint()
    assert checkpoint.optimizer is not None
    checkpoint.optimizer.param_groups = [
        {"eps": 1e-8, "betas": (0.9, 0.999)}, {"eps": 1e-5, "betas": (0.9, 0.999)},
    ]  # fmt: skip
    checkpoint.optimizer.group_of = {"w": 1}
    assert collect_layers([checkpoint]).iloc[0]["eps_dominance"] == 1.0


def test_adam_columns_are_nan_without_state_and_norms_survive_a_missing_step():
    checkpoint, _ = adam_checkpoint()
    assert checkpoint.optimizer is not None
    del checkpoint.optimizer.per_param["w"]["step"]
    row = collect_layers([checkpoint]).iloc[0]
    assert math.isnan(row["adam_step"]) and math.isnan(row["eps_dominance"])
    assert math.isnan(row["update_rms"]) and row["exp_avg_norm"] > 0
    bare = collect_layers([FakeCheckpoint(1, {"w": torch.ones(3)})]).iloc[0]
    assert all(math.isnan(bare[c]) for c in ("exp_avg_norm", "exp_avg_sq_norm", "update_rms"))


def test_layers_parquet_round_trips_with_histograms_as_int_lists(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    first, second = planted_run()
    checkpoint, _ = adam_checkpoint()
    layers = collect_layers([first, second, checkpoint])
    path = tmp_path / "layers.parquet"
    write_layers_parquet(layers, path)
    schema = pq.read_schema(path)
    assert schema.field("log_histogram").type == pa.list_(pa.int64())
    assert schema.metadata[b"tscope.layers_version"] == b"1"
    back = read_layers_parquet(path)
    assert tuple(back.columns) == LAYER_COLUMNS
    pd.testing.assert_frame_equal(
        back.drop(columns="log_histogram"), layers.drop(columns="log_histogram")
    )
    for read, written in zip(back["log_histogram"], layers["log_histogram"], strict=True):
        assert np.array_equal(read, written) and len(read) == LOG_HISTOGRAM_BINS
    assert pd.read_parquet(path)["numel"].sum() == layers["numel"].sum()  # plain pandas loads it


def test_reading_a_file_that_is_not_a_layers_table_says_so(tmp_path):
    junk = tmp_path / "layers.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(UnreadableInput, match="not a readable parquet file"):
        read_layers_parquet(junk)
    other = tmp_path / "other.parquet"
    pd.DataFrame({"step": [1]}).to_parquet(other)
    with pytest.raises(UnreadableInput, match="missing"):
        read_layers_parquet(other)


def open_run(run: str) -> list[Any]:
    from tscope.ingest.checkpoints.base import LoadOptions
    from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader

    folders = sorted((FIXTURES / run).glob("checkpoint-*"), key=lambda p: int(p.name[11:]))
    return [HfTrainerReader().open(p, p.name, LoadOptions()) for p in folders]


def test_the_lr_jump_window_moves_the_weights_more_per_step_than_the_window_after():
    # LR ×50 for steps 150-154, between checkpoint-120 and checkpoint-180 (fixtures/README.md).
    layers = collect_layers(open_run("lr_jump"))
    ratio = layers.pivot(index="tensor", columns="step", values="update_ratio_per_step")
    higher = (ratio[180] > ratio[240]).mean()
    assert higher >= 0.9, ratio
    stable = collect_layers(open_run("stable"))
    stable_ratio = stable.pivot(index="tensor", columns="step", values="update_ratio_per_step")
    assert (ratio[180] > 2 * stable_ratio[180]).mean() >= 0.9  # same window, no jump
    assert set(layers["delta_source"].dropna()) == {"weights_fp32"}
    assert (layers["adam_step"] == layers["step"]).all()


def test_lr_blowup_checkpoint_240_has_nan_weights_and_no_delta():
    layers = collect_layers(open_run("lr_blowup"))
    last = layers[layers["step"] == 240]
    assert (last["nonfinite_count"] > 0).any()
    assert last.loc[last["nonfinite_count"] > 0, "delta_norm"].isna().all()
    assert (layers.loc[layers["step"] < 240, "nonfinite_count"] == 0).all()


@dataclass
class _OutOfMemory(FakeCheckpoint):
    """load_tensor of `b` fails as torch's CPU allocator does."""

    def load_tensor(self, name: str) -> torch.Tensor:
        if name == "b":
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                "allocate memory: you tried to allocate 16384000000 bytes."
            )
        return super().load_tensor(name)


def test_a_tensor_that_does_not_fit_in_memory_is_one_partial_entry() -> None:
    # A RuntimeError from torch's allocator once ended the analysis in a traceback (red team
    # round 8, before the DCP readers bounded the allocation by the bytes a file holds).
    before, after = planted_run()
    failing = _OutOfMemory(after.step, after.tensors)
    table = collect_layers([before, failing])
    assert set(table[table.step == 200].tensor) == {"a", "c", "new_head"}
    assert any("tensor b: out of memory" in entry.problem for entry in failing.partial)


def test_other_runtime_errors_are_not_taken_for_memory() -> None:
    class Broken(FakeCheckpoint):
        def load_tensor(self, name: str) -> torch.Tensor:
            raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        collect_layers([Broken(100, {"a": torch.ones(2)})])
