"""Hostile checkpoints and cluster caches (red-team round on pickles, torch files, run names).

- A torch file whose pickle names a global of a module torch blocks outright (`os.system`,
  `posix.system`) was listed with torch's generic paragraph ("Weights only load failed. In
  PyTorch 2.6, ...") instead of the refusal and the --trust-pickle opt-in: torch words that
  refusal "whose module os is blocked", which none of safe_load's markers matched.
- A pickle whose memo reference names an entry never stored was "not a readable torch file (5)".
- An MLflow run named `.` had its case written into OUT/runs/ itself (and the cluster command then
  failed as a whole); `..` named OUT. Run names are now one folder name each, never a dot name.

Files are built at test time; the CLI runs in a child under limits (tests/hostile.py).
"""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest
from hostile import run_tscope
from test_hostile_checkpoints import case_partial, write_metrics

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.pickle_decoder import UndecodablePickle, decode_pickle
from tscope.ingest.checkpoints.safe_load import TRUST_HINT, safe_torch_load

PROTO_2 = b"\x80\x02"
MLFLOW_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "mlflow" / "mlflow.db.gz"


def system_call(module: bytes, marker: Path) -> bytes:
    """module.system("touch MARKER"): GLOBAL, MARK, the command, TUPLE, REDUCE, STOP."""
    return PROTO_2 + b"c" + module + b"\nsystem\n(V touch " + str(marker).encode() + b"\ntR."


MISSING_MEMO = PROTO_2 + b"h\x05."  # BINGET 5 with nothing memoized


@pytest.mark.parametrize("module", [b"os", b"posix", b"subprocess"])
def test_a_global_of_a_blocked_module_is_refused_with_the_opt_in(tmp_path, module):
    marker = tmp_path / "PWNED"
    path = tmp_path / "model.pt"
    path.write_bytes(system_call(module, marker))
    with pytest.raises(UnreadableInput) as refused:
        safe_torch_load(path, "model.pt", LoadOptions())
    assert "outside the safe set" in refused.value.problem
    assert refused.value.hint == TRUST_HINT
    assert not marker.exists()


def test_a_memo_reference_to_nothing_is_named_as_such():
    with pytest.raises(UndecodablePickle, match="memo reference to entry 5, never stored"):
        decode_pickle(MISSING_MEMO)


def test_the_cli_names_the_refused_global_and_the_missing_memo_entry(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    marker = tmp_path / "PWNED"
    (run / "step_10.pt").write_bytes(system_call(b"os", marker))
    (run / "step_20.pt").write_bytes(MISSING_MEMO)
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    assert "outside the safe set" in partial["step_10.pt"]
    assert "--trust-pickle" in partial["step_10.pt"]
    assert "KeyError 5" in partial["step_20.pt"]
    assert not any("Weights only load failed" in problem for problem in partial.values())
    assert not marker.exists()


def test_run_names_are_one_folder_name_each():
    from tscope.cluster_pipeline import MAX_FOLDER_NAME, _unique_names

    names = _unique_names([".", "..", "...x", "", "a b", "a_b", "a_b-2", "x" * 1000])
    assert names[:7] == ["_", "__", "___x", "run", "a_b", "a_b-2", "a_b-2-2"]
    assert len(names[7]) == MAX_FOLDER_NAME
    many = _unique_names(["x"] * 3000)
    assert len(set(many)) == 3000 and many[:3] == ["x", "x-2", "x-3"]


def test_mlflow_runs_named_dot_and_dot_dot_get_their_own_case_folders(tmp_path):
    from tscope.cluster_pipeline import cluster

    store = tmp_path / "mlflow.db"
    store.write_bytes(gzip.decompress(MLFLOW_STORE.read_bytes()))
    with sqlite3.connect(store) as connection:
        runs = connection.execute("SELECT run_uuid FROM runs ORDER BY start_time").fetchall()
        for (run_id,), name in zip(runs, ["..", "."], strict=False):
            connection.execute("UPDATE runs SET name = ? WHERE run_uuid = ?", (name, run_id))
    connection.close()
    out = tmp_path / "cluster"
    report = cluster(store, out, jobs=1)
    assert not report.skipped, report.skipped
    assert sorted(p.name for p in report.profiles) == ["_", "__", "nan_probe"]
    assert (out / "runs" / "_" / "case.json").is_file()
    assert (out / "runs" / "__" / "case.json").is_file()
    assert not (out / "runs" / "case.json").exists() and not (out / "case.json").exists()
    again = cluster(store, out, jobs=1)  # the cached cases, reused from their own folders
    assert all(p.reused_case for p in again.profiles)
