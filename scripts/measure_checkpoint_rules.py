"""Measure issue 11's checkpoint rules on healthy and planted real-producer runs.

    .venv/bin/python scripts/measure_checkpoint_rules.py            # committed fixtures + 2 byte Llamas

For every run with checkpoints it prints the statistic each warning-level rule compares with its
threshold (the largest over the run's windows) and whether the rule warns:

    update_ratio_high   raw update-ratio factor of a window vs the run's earlier windows
    lr_schedule_jump    LR rise between consecutive checkpoints (param groups), and the warm-up bound
    weight_norm_growth  acceleration of the norm growth per step vs the tensor's own past (windows
                        that grew ≥ 1.5×)
    adam_epsilon_dominance  share of coordinates with v > 0 that have √v̂ ≤ ε (latest checkpoint)

and the false-warning count on the healthy runs and the recall on the planted ones. The numbers
next to the constants in analyzers/explainers/{updates,checkpoint_lr,weights,optimizer_state}.py
come from this script.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

HEALTHY = [
    "trainer/stable",
    "trainer/stable_long_logging",
    "trainer/corrupted_batch",  # a data bump; its checkpoints are healthy
    *(f"layouts/{name}" for name in ("dcp_accelerate", "dcp_fsdp2_2ranks", "dcp_single")),
    *(f"layouts/{name}" for name in ("deepspeed_zero1_2ranks", "deepspeed_zero2_bf16")),
    *(f"layouts/{name}" for name in ("lightning", "lightning_named_groups")),
]
PLANTED = {
    "trainer/lr_jump": "update_ratio_high",  # LR ×50 for 5 steps: invisible in the LR held
    "trainer/lr_jump_persistent": "lr_schedule_jump",
}
RULES = ("update_ratio_high", "lr_schedule_jump", "weight_norm_growth", "adam_epsilon_dominance")


def statistics(run: Path) -> dict[str, float]:
    import numpy as np

    from tscope.analyzers.explainers.weights import NORM_GROWTH_FACTOR, _growth_table
    from tscope.ingest.checkpoints.base import LoadOptions
    from tscope.ingest.checkpoints.evidence import read_checkpoints

    evidence, _ = read_checkpoints(run, LoadOptions())
    if evidence is None or evidence.layers.empty:
        return {}
    layers = evidence.layers[~evidence.layers["tensor"].str.endswith("bias")]
    raw = layers.pivot_table(index="tensor", columns="step", values="update_ratio_per_step")
    update = 0.0
    for index in range(1, raw.shape[1]):  # windows with a past (the rule's main comparison)
        past = raw.iloc[:, :index].median(axis=1)
        update = max(update, float((raw.iloc[:, index] / past).median()))
    windows = raw.shape[1]
    rates = evidence.lr_by_step()
    steps = sorted(rates)
    rise = max(
        (rates[b] / rates[a] for a, b in itertools.pairwise(steps) if rates[a] > 0),
        default=float("nan"),
    )
    growth = _growth_table(evidence.layers, rates)
    grown = (
        growth[growth["growth"] >= NORM_GROWTH_FACTOR]["acceleration"].astype(float).dropna()
        if "acceleration" in growth
        else growth.iloc[:0, :0]
    )
    latest = evidence.layers[evidence.layers["step"] == evidence.layers["step"].max()]
    return {
        "windows": float(windows),
        "update_factor_vs_past": update,
        "ckpt_lr_rise": rise,
        "norm_accel_grown": float(grown.max()) if not grown.empty else 0.0,
        "max_growth": float(growth["growth"].max()) if not growth.empty else float("nan"),
        "eps_dominance": float(np.nanmax(latest["eps_dominance"].to_numpy(dtype=float)))
        if latest["eps_dominance"].notna().any()
        else float("nan"),
    }


def warnings(run: Path) -> set[str]:
    import tscope

    case = tscope.analyze(run)
    return {
        f.category
        for f in case.findings
        if f.severity in ("warning", "critical") and f.category in RULES
    }


def main() -> int:
    from byte_llama_run import train_byte_llama

    data = ROOT / "fixtures" / "data"
    with tempfile.TemporaryDirectory() as tmp:
        llamas = [
            train_byte_llama(Path(tmp) / "byte_short_warmup", 60, 15, warmup=10),
            train_byte_llama(Path(tmp) / "byte_gentle_warmup", 60, 10, warmup=40),
        ]
        healthy = [data / name for name in HEALTHY] + llamas
        false_warnings = {rule: 0 for rule in RULES}
        print("healthy runs")
        for run in healthy:
            stats, fired = statistics(run), warnings(run)
            for rule in fired:
                false_warnings[rule] += 1
            shown = ", ".join(f"{k} {v:.3g}" for k, v in stats.items())
            print(f"  {run.name}: {shown}; warns: {sorted(fired) or 'nothing'}")
        print("planted runs")
        hits = 0
        for name, expected in PLANTED.items():
            run = data / name
            stats, fired = statistics(run), warnings(run)
            hits += expected in fired
            shown = ", ".join(f"{k} {v:.3g}" for k, v in stats.items())
            print(f"  {name} (expects {expected}): {shown}; warns: {sorted(fired)}")
    print(f"false warnings on {len(healthy)} healthy runs: {false_warnings}")
    print(f"recall on planted: {hits} of {len(PLANTED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
