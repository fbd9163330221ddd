"""Property tests for the parsers of strangers' JSON and YAML: trainer_state.json, W&B's
config.yaml, the safe JSON loader and JSON Lines tables built from hostile fragments.

The readers' own test files fuzz their framing (TensorBoard, W&B offline, CSV/JSONL bytes, text
logs); these add the shapes of issue 9: nesting, huge and non-finite numbers, aliases, cut-off
and flipped bytes. A parser may return data or raise UnreadableInput, nothing else.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json, safe_yaml
from tscope.ingest.logs.tabular import read_table
from tscope.ingest.readers.trainer_state import TrainerStateReader

# Pieces of JSON that broke a parser once: deep nesting, numbers beyond every range, NaN.
HOSTILE_FRAGMENTS = [
    "[" * 5000 + "]" * 5000,
    '{"a":' * 300 + "1" + "}" * 300,
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    str(2**63),
    "9" * 5000,
    '"abc"',
    "[1]",
    "null",
    "true",
    "-0.0",
    '"\\ud800"',
]
fragments = st.sampled_from(HOSTILE_FRAGMENTS) | st.integers().map(str) | st.floats().map(repr)


def healthy_state() -> bytes:
    history = [{"step": s, "loss": 2.0 - s / 100, "epoch": s / 10} for s in range(1, 40)]
    return json.dumps({"log_history": history, "global_step": 39, "logging_steps": 1}).encode()


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 3000), flips=st.lists(st.integers(0, 3000), max_size=4))
def test_trainer_state_truncated_or_flipped_returns_data_or_unreadable(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flips: list[int]
) -> None:
    data = bytearray(healthy_state()[:cut])
    for flip in flips:
        if flip < len(data):
            data[flip] ^= 0x55
    path = tmp_path_factory.mktemp("fuzz") / "trainer_state.json"
    path.write_bytes(bytes(data))
    try:
        read = TrainerStateReader().read(path, path.name)
    except UnreadableInput:
        return
    assert read.metrics["step"].dtype == np.int64
    assert (read.metrics["step"] >= 0).all()


@settings(max_examples=60, deadline=None)
@given(step=fragments, value=fragments, global_step=fragments, epoch=fragments)
def test_trainer_state_with_hostile_numbers_returns_data_or_unreadable(
    tmp_path_factory: pytest.TempPathFactory, step: str, value: str, global_step: str, epoch: str
) -> None:
    text = (
        f'{{"global_step": {global_step}, "logging_steps": {value}, "log_history": ['
        f'{{"step": 1, "loss": 2.0}}, {{"step": {step}, "loss": {value}, "epoch": {epoch}}}]}}'
    )
    path = tmp_path_factory.mktemp("fuzz") / "trainer_state.json"
    path.write_text(text)
    try:
        read = TrainerStateReader().read(path, path.name)
    except UnreadableInput:
        return
    assert read.metrics["step"].dtype == np.int64
    assert read.started_at is not None and math.isfinite(read.started_at)


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=400) | st.lists(fragments, max_size=6).map(lambda p: ",".join(p)))
def test_safe_json_returns_int64_safe_data_or_unreadable(data: bytes | str) -> None:
    try:
        loaded = safe_json.loads(data, "x.json")
    except UnreadableInput:
        return
    pending = [loaded]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            assert -(2**63) <= item < 2**63


YAML_PIECES = [
    "a: &a [x, x, x]\n",
    "b: &b [*a, *a, *a, *a]\n",
    "c: [*b, *b, *b, *b, *b]\n",
    "d: &d [*d]\n",
    "e: !!python/object:os.system {}\n",
    "f: 2001-12-14\n",
    "g: !!binary aGVsbG8=\n",
    "h: " + "9" * 5000 + "\n",
    "i: " + "[" * 200 + "]" * 200 + "\n",
    "lr: {value: 0.001}\n",
    "<<: *a\n",
    "? [1, 2]\n: 3\n",
    "j: !!set {p, q}\n",
    "k: *missing\n",
]


@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(YAML_PIECES), max_size=8),
    cut=st.integers(0, 400),
    noise=st.text(max_size=30),
)
def test_yaml_config_returns_plain_data_or_unreadable(
    pieces: list[str], cut: int, noise: str
) -> None:
    text = "".join(pieces)
    text = text[:cut] + noise + text[cut:]
    try:
        loaded = safe_yaml.load(text, "config.yaml")
    except UnreadableInput:
        return
    json.dumps(loaded)  # plain data: every key a string, no sets, dates or bytes, no cycles


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(st.tuples(st.sampled_from(["loss", "x", "y"]), fragments), max_size=12))
def test_jsonl_with_hostile_values_returns_a_table_or_unreadable(
    tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[str, str]]
) -> None:
    text = "".join(
        f'{{"step": {step}, "{key}": {value}}}\n' for step, (key, value) in enumerate(lines)
    )
    path = tmp_path_factory.mktemp("fuzz") / "log.jsonl"
    path.write_text(text)
    try:
        table = read_table(path, path.name)
    except UnreadableInput:
        return
    for name in table.names:
        assert table.values[name].shape == (table.n_rows,)
