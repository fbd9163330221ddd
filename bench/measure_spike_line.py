"""How often a healthy run's replay window crosses its spike line, and whether planted spikes do.

    .venv/bin/python bench/measure_spike_line.py [EXTRA_RUN_DIR:SPIKE_STEP ...]

For every window (−5, +5) around step c of a healthy run's logged loss, the spike line is drawn
from the logged losses before the window (tscope.analyzers.replay.spike_line, the fallback a
replay uses when it starts near the window); a window whose loss crosses the line would be judged
as holding a spike. Healthy: the stable fixture runs and the sweep runs whose manifest says
"stable". Planted: corrupted_batch at 145, lr_jump at its first high-loss step 151, and any
RUN:STEP given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tscope.analyzers.replay import spike_line
from tscope.analyzers.signals import loss_series, primary_loss
from tscope.pipeline import analyze_run

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "fixtures" / "data" / "trainer"
SWEEP = ROOT / "fixtures" / "data" / "sweep"
WINDOW = (-5, 5)


def _logged(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    run = analyze_run(run_dir, read_weights=False).run
    metric = primary_loss(run)
    assert metric is not None
    steps, values = loss_series(run, metric)
    return np.asarray(steps), np.asarray(values, dtype=np.float64)


def _crosses(logged: tuple[np.ndarray, np.ndarray], centre: int) -> tuple[bool, float] | None:
    steps, values = logged
    first, last = centre + WINDOW[0], centre + WINDOW[1]
    reference = spike_line((), first, logged)
    inside = values[(steps >= first) & (steps <= last)]
    if reference is None or inside.size == 0:
        return None
    return bool(np.nanmax(inside) > reference[1]), float(reference[1])


def main(argv: list[str]) -> int:
    healthy = [TRAINER / "stable", TRAINER / "stable_long_logging"]
    for run in sorted(SWEEP.iterdir()):
        if json.loads((run / "manifest.json").read_text()).get("expected_status") == "stable":
            healthy.append(run)
    windows = crossed = 0
    for run in healthy:
        logged = _logged(run)
        run_crossed = 0
        for centre in logged[0].tolist():
            judged = _crosses(logged, int(centre))
            if judged is None:
                continue
            windows += 1
            run_crossed += judged[0]
        crossed += run_crossed
        print(f"healthy {run.name}: {run_crossed} windows cross their line")
    print(f"healthy: {crossed} of {windows} windows cross ({crossed / max(windows, 1):.2%})")
    planted = [(TRAINER / "corrupted_batch", 145), (TRAINER / "lr_jump", 151)]
    planted += [(Path(a.rsplit(":", 1)[0]), int(a.rsplit(":", 1)[1])) for a in argv]
    for run, step in planted:
        judged = _crosses(_logged(run), step)
        print(f"planted {run.name} at {step}: crosses={judged}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
