"""Pickles whose *values*, not their globals, attack the reader (red-team wave 2).

No global is named in these files, so neither the restricted decoder nor torch's weights_only
unpickler refuses them on sight: a dict key of a million nested 1-tuples (2 MB) made CPython
overflow its C stack while hashing it (SIGSEGV in `tscope analyze`, in tscope's decoder for
training_args.bin and inside torch.load for optimizer.pt), and an int of 3,000 bytes ended the
analysis in a ValueError traceback (str() of an int past 4,300 digits). Values of the wrong kind
in a decoded training_args.bin or a loaded scheduler.pt ("abc" for a learning rate) ended
`tscope xray` and `tscope replay` in tracebacks. The CLI tests run it in a child under limits
(tests/hostile.py).
"""

from __future__ import annotations

import io
import pickle
import shutil
import struct
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile import run_tscope
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hostile_checkpoints import case_partial, write_metrics

from tscope.errors import UsageError
from tscope.ingest.checkpoints.pickle_decoder import MAX_TUPLE_NESTING, decode_pickle
from tscope.ingest.checkpoints.pickle_literals import pickle_literals
from tscope.ingest.checkpoints.pickle_nesting import torch_pickles_nest_too_deep

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
PROTO_2 = b"\x80\x02"


def nested_tuple_key(depth: int) -> bytes:
    """{((...(None,)...),): None}: EMPTY_DICT, NONE, `depth` x TUPLE1, NONE, SETITEM, STOP."""
    return PROTO_2 + b"}N" + b"\x85" * depth + b"Ns."


def huge_int_value(n_bytes: int) -> bytes:
    """{"zz_huge_setting": int of n_bytes bytes} (LONG4)."""
    key = b"zz_huge_setting"
    return (
        PROTO_2
        + b"}X"
        + struct.pack("<I", len(key))
        + key
        + b"\x8b"
        + struct.pack("<i", n_bytes)
        + b"\x7f" * n_bytes
        + b"s."
    )


def torch_zip(data_pkl: bytes, decoy_first: bool) -> bytes:
    """A torch.save-shaped zip (stored records). With decoy_first a harmless `decoy/data.pkl`
    comes first in the directory, while torch reads the record under the first entry's folder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/version", "3\n")
        if decoy_first:
            archive.writestr("decoy/data.pkl", PROTO_2 + b"}.")
        archive.writestr("archive/data.pkl", data_pkl)
    return buffer.getvalue()


def test_the_decoder_refuses_deep_tuples_and_huge_ints_and_keeps_shallow_ones():
    assert pickle_literals(nested_tuple_key(1_000_000)) is None  # not a crash of the process
    assert pickle_literals(huge_int_value(3000)) is None
    shallow = decode_pickle(nested_tuple_key(MAX_TUPLE_NESTING - 1))
    assert len(shallow) == 1
    assert pickle_literals(huge_int_value(16)) == {
        "zz_huge_setting": int.from_bytes(b"\x7f" * 16, "little")
    }


def test_the_torch_screen_sees_every_data_pkl_of_a_zip_and_every_legacy_pickle():
    deep = nested_tuple_key(MAX_TUPLE_NESTING + 5)
    for payload in (torch_zip(deep, decoy_first=True), torch_zip(deep, decoy_first=False)):
        assert torch_pickles_nest_too_deep(io.BytesIO(payload), len(payload))
    legacy = PROTO_2 + b"K\x01." + PROTO_2 + b"K\x02." + deep  # the third pickle is the deep one
    assert torch_pickles_nest_too_deep(io.BytesIO(legacy), len(legacy))
    harmless = torch_zip(nested_tuple_key(3), decoy_first=True)
    assert not torch_pickles_nest_too_deep(io.BytesIO(harmless), len(harmless))


def test_a_million_deep_tuple_key_in_training_args_and_optimizer_is_partial_not_a_crash(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "lr_jump", run)
    deep = nested_tuple_key(1_000_000)
    (run / "checkpoint-180" / "training_args.bin").write_bytes(deep)
    (run / "checkpoint-180" / "optimizer.pt").write_bytes(deep)
    (run / "checkpoint-240" / "optimizer.pt").write_bytes(torch_zip(deep, decoy_first=True))
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()  # the crash was SIGSEGV (returncode -11)
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    assert "nests tuples more than" in partial["checkpoint-180/optimizer.pt"]
    assert "nests tuples more than" in partial["checkpoint-240/optimizer.pt"]
    assert "never unpickled" in partial["checkpoint-180/training_args.bin"]


def test_an_int_of_3000_bytes_in_training_args_is_partial_not_a_traceback(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "lr_jump", run)
    for checkpoint in ("checkpoint-120", "checkpoint-180", "checkpoint-240"):
        (run / checkpoint / "training_args.bin").write_bytes(huge_int_value(3000))
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "zz_huge_setting" not in (out / "case.json").read_text()


def test_a_deep_tuple_in_a_lone_state_dict_file_is_partial(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    (run / "step_50.pt").write_bytes(nested_tuple_key(1_000_000))
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "nests tuples more than" in case_partial(out)["step_50.pt"]


def test_a_dcp_metadata_of_40_mb_of_empty_dicts_is_partial_under_the_memory_limit(tmp_path):
    """One EMPTY_DICT byte builds a 64-byte dict: 40 MB asked for 3 GB, and under the 3 GiB
    limit the MemoryError ended analyze with "lost sys.stderr" and no readable error. Now the
    decoder's budget (32x the file: ~1.3 GB peak RSS, ~9 s) refuses it first."""
    run = tmp_path / "run"
    write_metrics(run)
    (run / "ckpt").mkdir()
    (run / "ckpt" / ".metadata").write_bytes(PROTO_2 + b"}" * (40 * 1024 * 1024) + b".")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path, timeout=300)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "more objects than a metadata file" in case_partial(out)["ckpt/.metadata"]


SEED_PICKLES = (
    pickle.dumps({"x": [(1, 2), ((3,),)], "y": {1, 2}, "z": b"\x85\x86"}, protocol=2),
    pickle.dumps([((((),),),)] * 3, protocol=4),
)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.sampled_from(SEED_PICKLES),
    edits=st.lists(
        st.tuples(st.floats(0, 1), st.integers(0, 10**6), st.sampled_from(b"\x85\x86\x87t(0)]}a.")),
        min_size=1,
        max_size=6,
    ),
)
def test_the_nesting_walk_answers_for_any_damaged_pickle(seed, edits):
    """Cut, overwritten and inserted opcodes never escape the walk as an exception: it answers,
    and torch.load reports what it cannot read."""
    data = bytearray(seed)
    for where, at, code in edits:
        position = at % len(data)
        if where < 0.4:
            data[position] = code
        elif where < 0.8:
            data.insert(position, code)
        elif len(data) > 1:
            del data[position]
    payload = bytes(data)
    assert torch_pickles_nest_too_deep(io.BytesIO(payload), len(payload)) in (True, False)


def test_xray_reads_crafted_training_args_values_as_defaults_not_a_traceback(tmp_path):
    """label_smoothing_factor "abc" in training_args.bin ended `tscope xray RUN` in a ValueError
    traceback; a config.json linked elsewhere was read through the link."""
    from tscope.xray.trainer_run import read_settings
    from tscope.xray.trainer_step import TrainerSettings

    run = tmp_path / "run"
    run.mkdir()
    crafted = {"label_smoothing_factor": "abc", "seed": "x", "per_device_train_batch_size": 4}
    (run / "training_args.bin").write_bytes(pickle.dumps(crafted, protocol=2))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"architectures": ["SecretModelFromElsewhere"]}')
    (run / "config.json").symlink_to(elsewhere)
    settings, notes = read_settings(run)
    defaults = TrainerSettings()
    assert settings.label_smoothing_factor == defaults.label_smoothing_factor
    assert settings.seed == defaults.seed
    assert settings.per_device_train_batch_size == 4
    assert "SecretModelFromElsewhere" not in settings.model_class + " ".join(notes)


@pytest.mark.parametrize(
    ("arguments", "scheduler_state"),
    [
        ({"learning_rate": "abc"}, None),  # an uncaught ValueError before
        ({"warmup_steps": "abc"}, None),
        ({}, {"optimizer": 5}),  # load_state_dict sets any attribute it names
        ({}, [1, 2]),  # a scheduler.pt that is not a mapping: an uncaught AttributeError
    ],
)
def test_a_crafted_schedule_is_no_schedule_not_a_traceback(arguments, scheduler_state):
    pytest.importorskip("transformers")
    from tscope.replay.lr_source import trainer_schedule

    training_args = {"lr_scheduler_type": "linear", **arguments}
    build = trainer_schedule(training_args, {"max_steps": 100}, scheduler_state, [1e-3])
    assert build is not None
    assert build(1, 3) is None
    honest = trainer_schedule({"lr_scheduler_type": "linear"}, {"max_steps": 100}, None, [1e-3])
    assert honest is not None and honest(1, 3) is not None


@pytest.mark.parametrize("learning_rate", ["abc", -1.0])
def test_a_fresh_adamw_from_crafted_training_args_is_one_line(learning_rate):
    """No optimizer.pt: the replay builds the Trainer's AdamW from training_args.bin, whose
    learning_rate "abc" (float) or -1 (AdamW's own check) ended `tscope replay` in a traceback."""
    import torch

    from tscope.replay.optimizer_build import _fresh_from_training_args

    files = SimpleNamespace(
        run_config={"optim": "adamw_torch", "learning_rate": learning_rate},
        choice=SimpleNamespace(
            shown="checkpoint-10", facts=SimpleNamespace(training_arguments=True)
        ),
    )
    with pytest.raises(UsageError) as caught:
        _fresh_from_training_args(torch.nn.Linear(2, 2), files, [])  # type: ignore[arg-type]
    assert "checkpoint-10: training_args.bin holds settings AdamW refuses" in str(caught.value)
    assert "\n" not in str(caught.value)
