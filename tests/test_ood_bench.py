"""The out-of-distribution set's draw (bench/ood/, docs/accuracy-ood.md): what it varies, its
cause windows and the schedules it adds to the benchmark's. Nothing is trained here."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

OOD_DIR = Path(__file__).resolve().parents[1] / "bench" / "ood"
ACCURACY_DIR = OOD_DIR.parent / "accuracy"
for _directory in (ACCURACY_DIR, OOD_DIR):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

import causes  # noqa: E402
import paths  # noqa: E402, F401  (fixtures/ on sys.path, no bytecode in the repository)
from ood_spec import OodSpec, build_ood_specs  # noqa: E402
from schedules import base_multiplier  # noqa: E402
from spec import CONTROL, FIXED_KNOBS, build_specs, knob  # noqa: E402

pytest.importorskip("torch")


def test_every_setup_is_a_control_and_a_planted_run_outside_the_benchmark():
    specs = build_ood_specs()
    assert len(specs) >= 24
    assert len({s.name for s in specs}) == len({s.key for s in specs}) == len(specs)
    controls = [s for s in specs if s.cause == CONTROL]
    assert len(controls) * 2 == len(specs)
    benchmark = build_specs()
    assert not {s.key for s in specs} & {s.key for s in benchmark}
    seen_schedules = {s.schedule for s in benchmark}
    for spec in specs:
        differs = (
            spec.schedule not in seen_schedules
            or spec.precision == "fp16"
            or spec.steps > 300
            or spec.hidden > 64
            or any(getattr(spec, name) != value for name, value in FIXED_KNOBS.items())
        )
        assert differs, spec.name
    assert all(s.split == "ood" for s in specs)
    assert OodSpec.from_json(specs[1].to_json()) == specs[1]


def test_a_benchmark_spec_reads_the_fixed_knobs():
    spec = build_specs()[0]
    assert {name: knob(spec, name) for name in FIXED_KNOBS} == FIXED_KNOBS
    ood = build_ood_specs()[0]
    assert knob(replace(ood, logging_steps=5), "logging_steps") == 5


def test_a_one_step_cause_may_show_at_the_next_logged_step():
    bad = next(s for s in build_ood_specs() if s.cause == "bad_batch")
    every_step = causes.step_window(replace(bad, logging_steps=1))
    assert every_step == (bad.planted_step - 1, bad.planted_step + 1)
    step = bad.planted_step
    averaged = replace(bad, logging_steps=10)
    # the loss logged at the next multiple of 10 averages the bad step in
    assert causes.step_window(averaged) == (step - 1, -(-(step + 1) // 10) * 10)


@pytest.mark.parametrize(
    ("schedule", "step", "expected"),
    [
        ("step", 10, 1.0),  # warm-up over: full LR
        ("step", 59, 1.0),  # progress 49/100
        ("step", 60, 0.1),  # progress 0.5: first ×0.1 drop
        ("step", 85, 0.01),  # progress 0.75: second drop
        ("polynomial", 10, 1.0),
        ("polynomial", 60, 0.25),  # (1 - 0.5)²
        ("polynomial", 110, 0.0),
    ],
)
def test_the_added_schedules(schedule: str, step: int, expected: float):
    assert base_multiplier(schedule, step, 10, 110) == pytest.approx(expected, abs=1e-12)


def test_the_third_block_is_held_out_and_plants_every_cause_once():
    from ood_spec import THIRD_BLOCK_KNOBS
    from spec import ALL_CAUSES

    assert all(s.index < 50 for s in build_ood_specs())  # only asked for by name
    third = build_ood_specs(blocks=(3,))
    assert [s.index for s in third] == list(range(50, 50 + len(third)))
    assert sorted(s.cause for s in third if s.cause != CONTROL) == sorted(ALL_CAUSES)
    assert len([s for s in third if s.cause == CONTROL]) * 2 == len(third)
    keys = {s.key for s in build_ood_specs(blocks=(1, 2))} | {s.key for s in build_specs()}
    assert not {s.key for s in third} & keys
    for spec in third:
        payload = spec.to_json()
        assert all(payload.get(n, FIXED_KNOBS[n]) == getattr(spec, n) for n in THIRD_BLOCK_KNOBS)
        assert OodSpec.from_json(payload) == spec
        if spec.cause == "bad_batch":
            assert 4 * spec.plant["rows"] >= spec.plant["of_rows"]
    # a spec at every third-block default writes none of those knobs (the earlier keys hold)
    assert not set(THIRD_BLOCK_KNOBS) & set(build_ood_specs()[0].to_json())


def test_the_fourth_block_is_held_out_and_plants_every_cause_once():
    from ood_spec import FOURTH_BLOCK_KNOBS, THIRD_BLOCK_KNOBS
    from spec import ALL_CAUSES
    from trainer_models import FAMILIES

    assert all(s.index < 70 for s in build_ood_specs(blocks=(1, 2, 3)))  # only asked for by name
    fourth = build_ood_specs(blocks=(4,))
    assert [s.index for s in fourth] == list(range(70, 90))
    assert build_ood_specs(blocks=(3, 4))[-len(fourth) :] == fourth
    assert sorted(s.cause for s in fourth if s.cause != CONTROL) == sorted(ALL_CAUSES)
    assert len([s for s in fourth if s.cause == CONTROL]) * 2 == len(fourth)
    assert all(s.producer.startswith("trainer_") for s in fourth)
    assert {s.model for s in fourth} - {"gpt2", "llama"} <= set(FAMILIES)
    assert len({s.model for s in fourth}) >= 8
    earlier = build_ood_specs(blocks=(1, 2, 3))
    keys = {s.key for s in earlier} | {s.key for s in build_specs()}
    assert not {s.key for s in fourth} & keys
    assert len({s.key for s in fourth}) == len({s.name for s in fourth}) == len(fourth)
    for spec in fourth:
        payload = spec.to_json()
        assert all(payload.get(n, FIXED_KNOBS[n]) == getattr(spec, n) for n in FOURTH_BLOCK_KNOBS)
        assert OodSpec.from_json(payload) == spec
        assert spec.heads % (spec.kv_heads or spec.heads) == 0
        if spec.cause == "bad_batch":
            assert 4 * spec.plant["rows"] >= spec.plant["of_rows"]
    # every fourth-block knob differs from its default somewhere, and no earlier spec writes one
    assert all(any(getattr(s, n) != FIXED_KNOBS[n] for s in fourth) for n in FOURTH_BLOCK_KNOBS)
    assert all(not set(FOURTH_BLOCK_KNOBS) & set(s.to_json()) for s in earlier)
    assert not set(FOURTH_BLOCK_KNOBS) & set(THIRD_BLOCK_KNOBS)


def test_the_fifth_block_is_held_out_and_plants_every_cause_once():
    from ood_spec import (
        FIFTH_BLOCK_KNOBS,
        FOURTH_BLOCK_KNOBS,
        LATE_FRACTION,
        THIRD_BLOCK_KNOBS,
    )
    from spec import ALL_CAUSES

    assert all(s.index < 90 for s in build_ood_specs(blocks=(1, 2, 3, 4)))  # asked for by name
    fifth = build_ood_specs(blocks=(5,))
    assert [s.index for s in fifth] == list(range(90, 110))
    assert build_ood_specs(blocks=(4, 5))[-len(fifth) :] == fifth
    assert sorted(s.cause for s in fifth if s.cause != CONTROL) == sorted(ALL_CAUSES)
    assert len([s for s in fifth if s.cause == CONTROL]) * 2 == len(fifth)
    earlier = build_ood_specs(blocks=(1, 2, 3, 4))
    keys = {s.key for s in earlier} | {s.key for s in build_specs()}
    assert not {s.key for s in fifth} & keys
    assert len({s.key for s in fifth}) == len({s.name for s in fifth}) == len(fifth)
    for spec in fifth:
        payload = spec.to_json()
        assert all(payload.get(n, FIXED_KNOBS[n]) == getattr(spec, n) for n in FIFTH_BLOCK_KNOBS)
        assert OodSpec.from_json(payload) == spec
        if spec.epochs:
            assert spec.steps % spec.epochs == 0 and spec.producer.startswith("trainer_")
        if spec.schedule == "reduce_lr_on_plateau":
            assert spec.eval_every and spec.warmup_steps == 0
        if spec.cause == "bad_batch":
            assert 4 * spec.plant["rows"] >= spec.plant["of_rows"]
    late = next(s for s in fifth if s.setup == "lt-late-weakjump" and s.cause != CONTROL)
    assert late.plant["step"] > LATE_FRACTION * late.steps and late.plant["factor"] == 3.0
    # every fifth-block knob differs from its default somewhere, and no earlier spec writes one
    assert all(any(getattr(s, n) != FIXED_KNOBS[n] for s in fifth) for n in FIFTH_BLOCK_KNOBS)
    assert all(not set(FIFTH_BLOCK_KNOBS) & set(s.to_json()) for s in earlier)
    assert not set(FIFTH_BLOCK_KNOBS) & set(THIRD_BLOCK_KNOBS + FOURTH_BLOCK_KNOBS)


def test_the_sixth_block_is_held_out_and_plants_every_cause_once():
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    assert all(s.index < 110 for s in build_ood_specs(blocks=(1, 2, 3, 4, 5)))
    sixth = build_ood_specs(blocks=(6,))
    assert [s.index for s in sixth] == list(range(110, 130))
    assert build_ood_specs(blocks=(5, 6))[-len(sixth) :] == sixth
    assert sorted(s.cause for s in sixth if s.cause != CONTROL) == sorted(ALL_CAUSES)
    earlier = build_ood_specs(blocks=(1, 2, 3, 4, 5))
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in sixth} & keys
    assert len({s.key for s in sixth}) == len({s.name for s in sixth}) == len(sixth)
    for spec in sixth:
        assert OodSpec.from_json(spec.to_json()) == spec
    planted = {s.setup: s for s in sixth if s.cause != CONTROL}
    # The draw settings the rows name: an early plant, a late one, one row, the weakest jump.
    early = planted["early-persistent"]
    assert 0.1 * early.steps <= early.plant["step"] < 0.2 * early.steps
    ramp = planted["lt-poly-early-ramp"]
    assert 0.1 * ramp.steps <= ramp.plant["step"] < 0.2 * ramp.steps
    last = planted["nano-long-last"]
    assert 0.92 * last.steps <= last.plant["step"] < 0.95 * last.steps
    assert last.plant["step"] + last.plant["length"] - 1 <= last.steps
    assert (
        planted["lt-batch32-onerow"].plant["rows"],
        planted["lt-batch32-onerow"].plant["of_rows"],
    ) == (1, 32)
    assert planted["batch2-weakjump"].plant["factor"] == 3.0
    assert all(200 <= s.steps <= 300 for s in sixth if s.setup == "log20")
    assert all(400 <= s.steps <= 600 for s in sixth if s.setup == "nano-long-last")


def test_the_seventh_block_is_held_out_and_plants_every_cause_once():
    from ood_blocks import SEVENTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    assert all(s.index < 130 for s in build_ood_specs(blocks=(1, 2, 3, 4, 5, 6)))
    seventh = build_ood_specs(blocks=(7,))
    assert [s.index for s in seventh] == list(range(130, 150))
    assert build_ood_specs(blocks=(6, 7))[-len(seventh) :] == seventh
    assert sorted(s.cause for s in seventh if s.cause != CONTROL) == sorted(ALL_CAUSES)
    earlier = build_ood_specs(blocks=(1, 2, 3, 4, 5, 6))
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in seventh} & keys
    assert len({s.key for s in seventh}) == len({s.name for s in seventh}) == len(seventh)
    assert not {row[0] for row in SEVENTH_BLOCK} & {s.setup for s in earlier}
    for spec in seventh:
        assert OodSpec.from_json(spec.to_json()) == spec
    planted = {s.setup: s for s in seventh if s.cause != CONTROL}
    # The draw settings the rows name: a long repetition ending within the run, a late ramp,
    # the weakest jump, a low peak LR, long runs logged every 10 or 5 steps.
    repeat = planted["llama-bf16-longrepeat"]
    assert 0.25 * repeat.steps <= repeat.plant["step"] < 0.4 * repeat.steps
    assert repeat.plant["length"] == 60
    assert repeat.plant["step"] + repeat.plant["length"] - 1 <= repeat.steps
    ramp = planted["lt-cos-late-ramp"]
    assert 0.7 * ramp.steps <= ramp.plant["step"] < 0.8 * ramp.steps
    weak = planted["nano-bf16-weakjump"]
    assert (weak.plant["factor"], weak.plant["window"], weak.precision) == (3.0, 1, "bf16")
    assert all(2e-4 <= s.peak_lr <= 5e-4 for s in seventh if s.setup == "lowlr-hot")
    assert all(
        200 <= s.steps <= 300 and s.logging_steps == 10
        for s in seventh
        if s.setup == "log10-badbatch"
    )
    assert all(s.save_every % s.logging_steps == 0 for s in seventh)
    assert planted["adafactor-optlost"].optimizer == "adafactor"


def test_the_eighth_block_is_held_out_and_plants_lr_ramps_on_decaying_schedules():
    from ood_blocks_late import EIGHTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import LR_RAMP

    assert all(s.index < 150 for s in build_ood_specs())
    earlier = build_ood_specs(blocks=(1, 2, 3, 4, 5, 6, 7))
    assert all(s.index < 150 for s in earlier)
    eighth = build_ood_specs(blocks=(8,))
    assert [s.index for s in eighth] == list(range(150, 162))
    # Adding the eighth block changes none of the first seven (names, keys, specs).
    assert build_ood_specs(blocks=(1, 2, 3, 4, 5, 6, 7, 8)) == earlier + eighth
    assert build_ood_specs(blocks=(7, 8))[-len(eighth) :] == eighth
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in eighth} & keys
    assert len({s.key for s in eighth}) == len({s.name for s in eighth}) == len(eighth)
    assert not {row[0] for row in EIGHTH_BLOCK} & {s.setup for s in earlier}
    for spec in eighth:
        assert OodSpec.from_json(spec.to_json()) == spec
        assert spec.schedule in ("linear", "cosine") and spec.warmup_steps > 0
    planted = [s for s in eighth if s.cause != CONTROL]
    assert len(planted) == len(EIGHTH_BLOCK) == 6
    assert all(s.cause == LR_RAMP for s in planted)
    ranges = {row[0]: row[2]["plant_range"] for row in EIGHTH_BLOCK}
    for spec in planted:
        low, high = ranges[spec.setup]
        assert low * spec.steps <= spec.plant["step"] < high * spec.steps
        assert spec.plant["step"] > spec.warmup_steps
    weak = [s for s in planted if s.setup.endswith("weakramp")]
    assert len(weak) == 2 and all(s.plant["growth"] == 1.04 for s in weak)


def test_the_ninth_block_is_held_out_plants_each_cause_once_and_changes_no_earlier_spec():
    from ood_blocks_late import NINTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    assert all(s.index < 162 for s in build_ood_specs())
    earlier = build_ood_specs(blocks=(1, 2, 3, 4, 5, 6, 7, 8))
    ninth = build_ood_specs(blocks=(9,))
    assert [s.index for s in ninth] == list(range(162, 182))
    assert build_ood_specs(blocks=(1, 2, 3, 4, 5, 6, 7, 8, 9)) == earlier + ninth
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in ninth} & keys
    assert len({s.key for s in ninth}) == len({s.name for s in ninth}) == len(ninth)
    assert not {row[0] for row in NINTH_BLOCK} & {s.setup for s in earlier}
    assert sorted(s.cause for s in ninth if s.cause != CONTROL) == sorted(ALL_CAUSES)
    for spec in ninth:
        assert OodSpec.from_json(spec.to_json()) == spec


def test_the_tenth_block_is_held_out_plants_each_cause_once_and_changes_no_earlier_spec():
    from ood_blocks_late import TENTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    earlier = build_ood_specs(blocks=tuple(range(1, 10)))
    tenth = build_ood_specs(blocks=(10,))
    assert [s.index for s in tenth] == list(range(182, 202))
    assert build_ood_specs(blocks=tuple(range(1, 11))) == earlier + tenth
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in tenth} & keys
    assert len({s.key for s in tenth}) == len({s.name for s in tenth}) == len(tenth)
    assert not {row[0] for row in TENTH_BLOCK} & {s.setup for s in earlier}
    assert sorted(s.cause for s in tenth if s.cause != CONTROL) == sorted(ALL_CAUSES)
    for spec in tenth:
        assert OodSpec.from_json(spec.to_json()) == spec


def test_the_eleventh_block_is_held_out_plants_each_cause_once_and_changes_no_earlier_spec():
    from ood_blocks_late import ELEVENTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    earlier = build_ood_specs(blocks=tuple(range(1, 11)))
    eleventh = build_ood_specs(blocks=(11,))
    assert [s.index for s in eleventh] == list(range(202, 222))
    assert build_ood_specs(blocks=tuple(range(1, 12))) == earlier + eleventh
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in eleventh} & keys
    assert not {row[0] for row in ELEVENTH_BLOCK} & {s.setup for s in earlier}
    assert sorted(s.cause for s in eleventh if s.cause != CONTROL) == sorted(ALL_CAUSES)


def test_the_twelfth_block_is_held_out_plants_each_cause_once_and_changes_no_earlier_spec():
    from ood_blocks_late import TWELFTH_BLOCK
    from smoke_runs import smoke_specs
    from spec import ALL_CAUSES

    earlier = build_ood_specs(blocks=tuple(range(1, 12)))
    twelfth = build_ood_specs(blocks=(12,))
    assert [s.index for s in twelfth] == list(range(222, 242))
    assert build_ood_specs(blocks=tuple(range(1, 13))) == earlier + twelfth
    keys = {s.key for s in earlier} | {s.key for s in build_specs() + smoke_specs()}
    assert not {s.key for s in twelfth} & keys
    assert not {row[0] for row in TWELFTH_BLOCK} & {s.setup for s in earlier}
    assert sorted(s.cause for s in twelfth if s.cause != CONTROL) == sorted(ALL_CAUSES)
