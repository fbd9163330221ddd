"""One line that names the real reason (red team, session 25): a UTF-16 CSV is not "of unknown
format"; a training_args.bin that is a link is listed once, as a link; a replay's config.json that
is a link is not "missing"."""

from __future__ import annotations

import codecs
import shutil
from pathlib import Path

import pytest

from tscope.errors import TscopeError
from tscope.pipeline import analyze_run

LR_JUMP_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer" / "lr_jump"


def test_a_utf16_csv_is_named_as_utf16(tmp_path):
    rows = "step,loss\n" + "".join(f"{i},{2.0 - i * 0.001}\n" for i in range(1, 100))
    csv = tmp_path / "metrics.csv"
    csv.write_bytes(codecs.BOM_UTF16_LE + rows.encode("utf-16-le"))
    with pytest.raises(TscopeError) as caught:
        analyze_run(str(csv))
    assert "UTF-16" in str(caught.value) and "re-save it as UTF-8" in str(caught.value)


def test_a_linked_training_args_is_listed_once_as_a_link(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(LR_JUMP_RUN, run)
    target = tmp_path / "elsewhere.bin"
    shutil.move(run / "checkpoint-120" / "training_args.bin", target)
    (run / "checkpoint-120" / "training_args.bin").symlink_to(target)
    case, _ = analyze_run(str(run))
    about = [p.problem for p in case.partial if p.path == "checkpoint-120/training_args.bin"]
    assert len(about) == 1 and "symbolic link" in about[0]


def test_a_replays_linked_config_json_is_named_as_a_link(tmp_path):
    from types import SimpleNamespace

    from tscope.errors import UsageError
    from tscope.replay.model_build import build_model

    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    (tmp_path / "config.json").write_text("{}")
    (checkpoint / "config.json").symlink_to(tmp_path / "config.json")
    facts = SimpleNamespace(model_from_config_json=True)
    files = SimpleNamespace(
        model_config=None,
        choice=SimpleNamespace(path=checkpoint, shown="checkpoint-10", facts=facts),
    )
    with pytest.raises(UsageError) as caught:
        build_model(files, SimpleNamespace(build_model=None, path="entry.py"))  # type: ignore[arg-type]
    assert "config.json is a symbolic link" in str(caught.value)
