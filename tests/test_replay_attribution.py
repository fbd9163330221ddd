"""Bad samples from a replay: per-sample losses and gradients at the spike step and the steps
before it, and the bad_batch finding (the outlier rule and skip_batches.json are
tests/test_replay_bad_sample_rule.py).

The incident: corrupted_batch had six rows of step 145's batch replaced by random tokens. A
replay around 145 must name exactly those rows, see nothing in the clean steps before it or in
the stable run, and leave the replay as it was: within the fidelity tolerance on the committed
fixtures (recorded on another CPU), bit for bit on a run trained on this machine.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from any_cpu import REPRODUCED_REL_TOL

from tscope.replay import api
from tscope.replay.attribution import SampleAttribution, attribution_steps
from tscope.replay.entry import Entry
from tscope.replay.isolation import hook_snapshot, rng_snapshot
from tscope.replay.losses import ENTRY_LOSS, MODEL_LOSS, micro_batch_loss
from tscope.replay.sample_grads import BATCH_JACOBIAN, PER_ROW, VMAP, per_sample_gradients
from tscope.replay.sample_losses import LossSpec
from tscope.replay.skip_list import (
    write_skip_batches,
)

ROOT = Path(__file__).resolve().parents[1]


TRAINER_RUNS = ROOT / "fixtures/data/trainer"


FIXTURE_ENTRY = ROOT / "fixtures/entries/trainer_fixtures.py"


SPIKE_STEP = 145


GRAD_REL_TOL = 1e-5


def _tiny_gpt2(dropout: float = 0.0) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=96,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return GPT2LMHeadModel(config).train()


def _batch(rows: int, seed: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 96, (rows, 16), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "labels": ids.clone()}


def _entry(loss_fn: Any = None) -> Entry:
    return Entry(path="test_entry.py", batches=lambda start: iter(()), loss_fn=loss_fn)


def _backward(
    model: torch.nn.Module, micro: list[dict[str, torch.Tensor]], path: str, entry: Entry
) -> tuple[list[torch.Tensor], LossSpec, list[Any]]:
    """The loop's forward and backward of one step: per-sample losses, the spec, RNG states."""
    rows = sum(int(b["input_ids"].shape[0]) for b in micro)
    num_items = sum((b["labels"][..., 1:].ne(-100).sum() for b in micro), torch.tensor(0))
    losses, states = [], []
    for batch in micro:
        states.append(rng_snapshot(torch.device("cpu")))
        loss, per_sample = micro_batch_loss(path, model, batch, entry, num_items, rows, len(micro))
        loss.backward()
        losses.append(per_sample)
    spec = LossSpec(path, entry, num_items, rows, len(micro))
    return losses, spec, states


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = {f"w:{n}": p.detach().clone() for n, p in model.named_parameters()}
    state.update({f"g:{n}": p.grad.clone() for n, p in model.named_parameters()})
    return state


def test_per_sample_gradients_add_up_to_the_step_gradient_and_touch_nothing():
    model = _tiny_gpt2()
    micro = [_batch(6, 1), _batch(6, 2)]  # gradient accumulation: 2 micro-batches of 6
    losses, spec, _ = _backward(model, micro, MODEL_LOSS, _entry())
    before, rng = _state(model), torch.get_rng_state()
    result = per_sample_gradients(model, micro, losses, spec)
    after = _state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)  # bitwise: .grad and weights
    assert torch.equal(rng, torch.get_rng_state())
    assert result.method == VMAP and len(result.shares) == 12 and result.checked
    assert abs(sum(result.shares) - 1.0) <= GRAD_REL_TOL
    assert result.sum_rel_diff <= GRAD_REL_TOL
    assert result.loss_rel_diff <= GRAD_REL_TOL
    loop = torch.cat(losses).tolist()
    assert np.mean(result.losses) == pytest.approx(np.mean(loop), rel=GRAD_REL_TOL)


def test_vmap_and_the_row_loop_agree(monkeypatch):
    model = _tiny_gpt2()
    micro = [_batch(8, 3)]
    losses, spec, _ = _backward(model, micro, MODEL_LOSS, _entry())
    batched = per_sample_gradients(model, micro, losses, spec)

    def no_vmap(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no batching rule for this op")

    monkeypatch.setattr(torch.func, "vmap", no_vmap)
    looped = per_sample_gradients(model, micro, losses, spec)
    assert (batched.method, looped.method) == (VMAP, PER_ROW)
    assert any("vmap failed" in note for note in looped.notes)
    np.testing.assert_allclose(looped.norms, batched.norms, rtol=GRAD_REL_TOL)
    np.testing.assert_allclose(looped.shares, batched.shares, rtol=1e-4, atol=1e-7)
    assert looped.sum_rel_diff <= GRAD_REL_TOL


def test_chunks_of_rows_give_the_same_numbers():
    model = _tiny_gpt2()
    micro = [_batch(8, 4)]
    losses, spec, _ = _backward(model, micro, MODEL_LOSS, _entry())
    whole = per_sample_gradients(model, micro, losses, spec)
    numel = sum(p.numel() for p in model.parameters())
    chunked = per_sample_gradients(model, micro, losses, spec, chunk_bytes=numel * 4 * 3 * 3)
    assert any("3 rows per vmap chunk" in note for note in chunked.notes)
    np.testing.assert_allclose(chunked.norms, whole.norms, rtol=GRAD_REL_TOL)


def _batch_normalised_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
    """A loss_fn that divides by its own batch's token count: a one-row slice is not the same."""
    from tscope.replay.losses import causal_lm_token_losses

    logits = model(input_ids=batch["input_ids"]).logits
    tokens = causal_lm_token_losses(logits, batch["labels"])  # (rows, T)
    return tokens.sum(dim=1) / batch["labels"][..., 1:].numel()


def test_a_loss_normalised_by_its_batch_falls_back_to_the_batch_jacobian():
    model = _tiny_gpt2()
    micro = [_batch(8, 5)]
    entry = _entry(_batch_normalised_loss)
    losses, spec, _ = _backward(model, micro, ENTRY_LOSS, entry)
    result = per_sample_gradients(model, micro, losses, spec)
    assert result.method == BATCH_JACOBIAN
    assert result.sum_rel_diff <= GRAD_REL_TOL and result.loss_rel_diff <= GRAD_REL_TOL


def test_dropout_masks_of_the_step_are_replayed_for_the_batch_jacobian():
    model = _tiny_gpt2(dropout=0.1)
    micro = [_batch(8, 6), _batch(8, 7)]
    losses, spec, states = _backward(model, micro, MODEL_LOSS, _entry())
    rng = torch.get_rng_state()
    result = per_sample_gradients(model, micro, losses, spec, rng_before=states)
    assert torch.equal(rng, torch.get_rng_state())  # the replay's RNG stream is not advanced
    assert result.method == BATCH_JACOBIAN  # one-row dropout masks differ from the batch's
    assert result.sum_rel_diff <= GRAD_REL_TOL


def test_mixed_precision_rounding_is_not_mistaken_for_another_loss():
    model = _tiny_gpt2()
    batch = _batch(8, 9)
    entry = _entry()
    num_items = batch["labels"][..., 1:].ne(-100).sum()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, per_sample = micro_batch_loss(MODEL_LOSS, model, batch, entry, num_items, 8, 1)
    loss.backward()
    spec = LossSpec(MODEL_LOSS, entry, num_items, 8, 1, autocast_dtype=torch.bfloat16)
    result = per_sample_gradients(model, [batch], [per_sample], spec)
    assert result.method == VMAP and result.checked  # bf16 rounding: ~2e-3, no batch Jacobian
    assert 0 < result.sum_rel_diff < 2e-2


def test_hooks_other_observers_added_for_the_step_do_not_see_the_extra_forwards():
    model = _tiny_gpt2()
    micro = [_batch(8, 8)]
    losses, spec, _ = _backward(model, micro, MODEL_LOSS, _entry())
    snapshot = hook_snapshot(model)
    calls: list[str] = []
    handle = model.transformer.h[0].register_forward_hook(lambda *args: calls.append("h0"))
    try:
        per_sample_gradients(model, micro, losses, spec, hooks_before_step=snapshot)
        assert calls == []
        model(**micro[0])
        assert calls == ["h0"]  # and it is back afterwards
    finally:
        handle.remove()


def attributed_replay(
    monkeypatch: pytest.MonkeyPatch,
    run: str,
    runs_dir: Path = TRAINER_RUNS,
    spike_step: int = SPIKE_STEP,
) -> tuple[Any, SampleAttribution]:
    """Replay `run` over spike-24..spike+2 (121..147 for the fixtures) with the observer on the
    spike and the 3 steps before it, bound once restored."""
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", run)
    attribution = SampleAttribution(attribution_steps(spike_step))
    restore = api.restore

    def restore_and_bind(files: Any, entry: Entry, *args: Any, **kwargs: Any) -> Any:
        restored = restore(files, entry, *args, **kwargs)
        attribution.bind(entry, restored.settings)
        return restored

    monkeypatch.setattr(api, "restore", restore_and_bind)
    result = api.replay(
        runs_dir / run,
        around=spike_step,
        window=(-3, 2),
        entry=FIXTURE_ENTRY,
        observers=[attribution],
    )
    return result, attribution


@pytest.fixture(scope="module")
def corrupted() -> tuple[Any, SampleAttribution]:
    monkeypatch = pytest.MonkeyPatch()
    try:
        return attributed_replay(monkeypatch, "corrupted_batch")
    finally:
        monkeypatch.undo()


def _planted() -> list[int]:
    manifest = json.loads((TRAINER_RUNS / "corrupted_batch/manifest.json").read_text())
    assert manifest["planted"]["step"] == SPIKE_STEP
    return sorted(manifest["planted"]["in_batch_indices"])


def test_the_planted_rows_of_step_145_are_the_bad_samples(corrupted):
    _, attribution = corrupted
    bad = attribution.bad_samples()
    assert [b.step for b in bad] == [SPIKE_STEP] * len(_planted())
    assert [b.index for b in bad] == _planted()
    assert sum(b.share for b in bad) == pytest.approx(0.9, abs=0.03)
    spike = {r.step: r for r in attribution.results}[SPIKE_STEP]
    assert abs(sum(spike.shares) - 1.0) <= GRAD_REL_TOL
    assert spike.sum_rel_diff is not None and spike.sum_rel_diff <= GRAD_REL_TOL
    assert spike.gradients_checked and spike.method == VMAP
    loop = next(s for s in corrupted[0].per_step if s.step == SPIKE_STEP).per_sample_loss
    assert spike.losses == loop  # the loop's own per-sample losses


def test_the_clean_steps_before_the_spike_flag_nothing(corrupted):
    _, attribution = corrupted
    results = {r.step: r for r in attribution.results}
    assert sorted(results) == [142, 143, 144, 145]
    for step in (142, 143, 144):
        assert results[step].verdict.applied and results[step].verdict.bad == ()


def test_the_replay_still_reproduces_the_log_with_the_observer(corrupted):
    result, _ = corrupted
    fidelity = result.fidelity
    assert result.steps == (121, 147)  # 146-147: the weights after the watched steps are right
    assert fidelity.reproduced and fidelity.compared_steps == 27
    assert fidelity.max_rel_loss_diff <= REPRODUCED_REL_TOL


def test_the_observer_leaves_a_replay_on_this_machine_bit_exact(monkeypatch, local_trainer_run):
    result, attribution = attributed_replay(
        monkeypatch, local_trainer_run.name, local_trainer_run.parent, spike_step=22
    )
    fidelity = result.fidelity
    assert [r.step for r in attribution.results] == [19, 20, 21, 22]
    assert result.steps == (11, 24)  # 23-24: the weights after the watched steps are right
    assert fidelity.bit_exact_steps == fidelity.compared_steps == 14


def test_the_stable_run_flags_nothing_at_the_same_steps(monkeypatch):
    result, attribution = attributed_replay(monkeypatch, "stable")
    assert result.fidelity.reproduced
    assert result.fidelity.max_rel_loss_diff <= REPRODUCED_REL_TOL
    assert [r.step for r in attribution.results] == [142, 143, 144, 145]
    assert attribution.bad_samples() == ()


def test_the_skip_file_and_the_bad_batch_finding(corrupted, tmp_path):
    from tscope.analyzers.replay.samples import bad_batch_findings

    result, attribution = corrupted
    skips = attribution.skip_suggestion()
    assert skips.batches == (SPIKE_STEP - 2, SPIKE_STEP - 1)  # single-epoch batch_idx 144, 143
    assert skips.samples == {SPIKE_STEP: tuple(_planted())}
    written = write_skip_batches(tmp_path, skips, run_dir=TRAINER_RUNS / "corrupted_batch")
    assert json.loads(written.read_text()) == [143, 144]
    payload = [r.to_dict() for r in attribution.results]
    json.dumps(payload, allow_nan=False)
    assert payload[-1]["bad"] == _planted()
    with_samples = dataclasses.replace(result, bad_samples=attribution.bad_samples())
    findings = bad_batch_findings(with_samples, qualified=False)
    assert [(f.category, f.step) for f in findings] == [("bad_batch", SPIKE_STEP)]
    assert findings[0].evidence["indices"] == _planted()


def test_a_step_without_an_entry_binding_says_how_to_bind():
    attribution = SampleAttribution([3])
    context = type("Context", (), {"step": 3})()
    with pytest.raises(RuntimeError, match=r"bind\(entry, settings\)"):
        attribution.on_step_start(context)  # type: ignore[arg-type]


def test_attribution_steps_are_the_spike_and_the_three_before():
    assert attribution_steps(145) == (142, 143, 144, 145)
    assert attribution_steps(2) == (1, 2)
