"""Measure the cause competition's evidence terms (analyzers/causes.py) on the benchmark's dev split.

    nice -n 10 .venv/bin/python scripts/measure_cause_terms.py [--cache ~/.cache/tscope-bench]

For every cached dev run it rebuilds the headline's competition and, for each candidate, records
which terms hold (measured, timed, shape) and whether the candidate names the planted cause in its
window (bench/accuracy/causes.py `cause_is_right`; on a control no candidate is right). It prints,
per term, right / candidates for which the term holds — the numbers written next to
CAUSE_TERM_PRECISION — and how often the winner was right.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "accuracy"))

import causes as bench_causes  # noqa: E402
import paths  # noqa: E402  (puts fixtures/ on sys.path)
from generate import is_done, run_folder  # noqa: E402
from spec import build_specs, select  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=Path, default=paths.default_cache())
    options = parser.parse_args()

    from tscope.analyzers import Evidence, explain
    from tscope.analyzers.causes import compete, incident_of
    from tscope.analyzers.detect import detect
    from tscope.analyzers.incidents import incidents as find_incidents
    from tscope.analyzers.ranking import rank_findings
    from tscope.ingest.inputs import ReadOptions, read_inputs
    from tscope.model.categories import ALERT_SEVERITIES

    terms = {"measured": [0, 0], "timed": [0, 0], "shape": [0, 0], "none": [0, 0]}
    winners = [0, 0]
    rows = []
    for spec in select(build_specs(), "dev"):
        if not is_done(options.cache, spec):
            continue
        inputs = read_inputs([run_folder(options.cache, spec) / "run"], ReadOptions())
        run = inputs.run
        spikes, change_points = detect(run)
        evidence = Evidence(run, spikes, change_points, inputs.checkpoint_evidence)
        incidents = find_incidents(evidence)
        findings = rank_findings(explain(evidence), incidents)
        alerts = [f for f in findings if f.severity in ALERT_SEVERITIES]
        if not alerts:
            continue
        incident = incident_of(alerts[0], incidents)
        verdict = compete(evidence, alerts[0], incident, findings)
        for candidate in verdict.candidates:
            source = candidate.finding.source if candidate.finding is not None else "logs"
            right = bench_causes.cause_is_right(spec, candidate.category, candidate.step, source)
            held = [t for t in ("measured", "timed", "shape") if getattr(candidate, t)] or ["none"]
            for term in held:
                terms[term][0] += int(right)
                terms[term][1] += 1
            if candidate is verdict.winner:
                winners[0] += int(right)
                winners[1] += 1
            rows.append((spec.name, candidate.category, candidate.step, held, right))
    for name, category, step, held, right in rows:
        print(f"{name:45s} {category:24s} {step!s:>5s} {'+'.join(held):22s} {right}")
    print(json.dumps({"terms (right, candidates)": terms, "winner (right, named)": winners}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
