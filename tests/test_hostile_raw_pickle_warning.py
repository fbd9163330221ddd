"""A bare pickle (no torch.save zip) where torch expects a file is refused in one partial line,
and torch's own "Detected pickle protocol 4" UserWarning stays off the user's terminal."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

from tests.hostile import run_tscope

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("ran code from the file",))


def test_a_bare_pickle_rng_file_is_refused_without_a_torch_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / "accelerate_lr_jump", run)
    (run / "step_2" / "random_states_0.pkl").write_bytes(pickle.dumps(_Payload(), protocol=4))

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "Warning" not in outcome.stderr and "pickle protocol" not in outcome.stderr, (
        outcome.stderr
    )
    assert "ran code from the file" not in outcome.stdout + outcome.stderr
    case = json.loads((tmp_path / "case" / "case.json").read_text(encoding="utf-8"))
    refused = [p for p in case["partial"] if p["path"] == "step_2/random_states_0.pkl"]
    assert len(refused) == 1, case["partial"]
    assert "outside the safe set" in refused[0]["problem"]
    assert "--trust-pickle" in refused[0]["problem"]
