"""Analyze a real Trainer run from the fixtures with the Python API and print the first screen.

.venv/bin/python examples/analyze_fixture_run.py [RUN_DIR] [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import tscope

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    run_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures/data/trainer/lr_jump"
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="tscope-"))
    case = tscope.analyze(run_dir)
    print(case.summary.verdict)
    for finding in case.findings[:3]:
        print(f"  {finding.id} {finding.severity:8s} {finding.category} @ {finding.step}")
    for path in tscope.render_case(case, out_dir):
        print(path)


if __name__ == "__main__":
    main()
