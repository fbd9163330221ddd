"""A sweep whose runs all stayed stable is not reported as if nothing happened.

`tscope cluster` calls a run unstable when it blew up. A run whose bad batch it recovered from,
or one that overfit, is stable by that measure, and the sweep's verdict read "All 4 runs are
stable" while two of the four cases reported an incident. The verdict now names them, and
cluster.json carries each run's own case status. Runs: real-producer fixtures
(fixtures/make_long_run_logs.py, fixtures/make_overfitting_runs.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tscope.cluster_pipeline import cluster

DATA = Path(__file__).resolve().parent / "data"


def test_stable_runs_with_an_incident_are_named(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shutil.copytree(DATA / "long_run_bad_batch" / "bad_batch_330", sweep / "badbatch")
    shutil.copytree(DATA / "long_run_bad_batch" / "healthy", sweep / "healthy")
    shutil.copytree(DATA / "overfitting_trainer" / "overfit", sweep / "overfit")
    out = tmp_path / "out"
    report = cluster(sweep, out_dir=out, jobs=1)
    assert all(p.status == "stable" for p in report.profiles)
    verdict = report.summary["verdict"]
    assert verdict.startswith("All 3 runs are stable (none blew up).")
    assert "2 of the stable runs had an incident their own case reports (badbatch, overfit)" in (
        verdict
    )
    runs = {r["name"]: r for r in json.loads(json.dumps(report.to_dict()))["runs"]}
    assert runs["badbatch"]["case_status"] == "incident"
    assert runs["overfit"]["case_status"] == "incident"
    assert runs["healthy"]["case_status"] == "healthy"
