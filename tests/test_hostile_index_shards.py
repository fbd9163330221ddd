"""A safetensors index naming thousands of missing shards gives a bounded `partial` section.

One entry per missing shard made an index of 200,000 (6.5 MB) into 200,000 entries, a 22 MB
case.json and 22 s of symlink resolution. A few shards are named; one entry counts the rest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tscope
from tscope.ingest.checkpoints.weights_folder import MAX_SHARD_FILES, MAX_SHARDS_NAMED
from tscope.model import PartialInput

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
INDEX = "step_4/model.safetensors.index.json"


def _run_with_index(tmp_path: Path, missing: list[str]) -> list[PartialInput]:
    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / "accelerate_lr_jump", run)
    folder = run / "step_4"
    (folder / "model.safetensors").rename(folder / "model-00001.safetensors")
    weight_map = {f"t{i}": name for i, name in enumerate(missing)}
    weight_map["emb.weight"] = "model-00001.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    case = tscope.analyze(run)
    return [p for p in case.partial if p.path.startswith("step_4/")]


def test_many_missing_shards_are_named_a_few_then_counted(tmp_path: Path) -> None:
    missing = [f"s{i:04d}.safetensors" for i in range(200)]
    entries = _run_with_index(tmp_path, missing)

    assert len(entries) == MAX_SHARDS_NAMED + 1, entries
    named = entries[:MAX_SHARDS_NAMED]
    assert [p.path for p in named] == [f"step_4/{name}" for name in missing[:MAX_SHARDS_NAMED]]
    assert all(p.problem == "shard listed in the index is missing" for p in named)
    assert entries[-1].path == INDEX
    assert entries[-1].problem == (
        f"{200 - MAX_SHARDS_NAMED} more shard(s) listed in the index are missing"
    )


def test_an_index_naming_more_shard_files_than_the_cap_says_so_once(tmp_path: Path) -> None:
    missing = [f"s{i:06d}.safetensors" for i in range(MAX_SHARD_FILES + 500)]
    entries = _run_with_index(tmp_path, missing)

    assert len(entries) == MAX_SHARDS_NAMED + 2, entries[:10]
    assert entries[0].path == INDEX
    assert f"names {len(missing) + 1} shard files" in entries[0].problem
    assert f"at most {MAX_SHARD_FILES}" in entries[0].problem


def test_a_long_missing_shard_name_is_cut_in_the_partial_path(tmp_path: Path) -> None:
    entries = _run_with_index(tmp_path, ["a" * 100_000 + ".safetensors"])

    assert len(entries) == 1, [p.path[:100] for p in entries]
    assert len(entries[0].path) < 200
    assert entries[0].problem == "shard listed in the index is missing"


def test_many_shards_named_outside_the_folder_are_named_a_few_then_counted(
    tmp_path: Path,
) -> None:
    entries = _run_with_index(tmp_path, [f"../../x{i:03d}.safetensors" for i in range(50)])

    assert len(entries) == MAX_SHARDS_NAMED + 1, entries
    assert all(p.path == INDEX and "outside the input folder" in p.problem for p in entries)
    assert entries[-1].problem.startswith(f"weight_map names {50 - MAX_SHARDS_NAMED} more")


def test_shard_values_that_are_not_names_are_one_entry(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / "accelerate_lr_jump", run)
    folder = run / "step_4"
    (folder / "model.safetensors").rename(folder / "model-00001.safetensors")
    weight_map: dict[str, object] = {f"t{i}": ["x" * 1000] * 100 for i in range(100)}
    weight_map["emb.weight"] = "model-00001.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))

    case = tscope.analyze(run)

    entries = [p for p in case.partial if p.path.startswith("step_4/")]
    assert [(p.path, p.problem) for p in entries] == [
        (INDEX, "weight_map gives 100 tensor(s) a shard that is not a file name")
    ]
