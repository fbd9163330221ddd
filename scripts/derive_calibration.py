"""Derive every alert finding's calibrated confidence from the accuracy benchmark's results.

    nice -n 10 .venv/bin/python scripts/derive_calibration.py --score --write

scores the spent splits whose runs the cache keeps (dev and holdout7–19, each held-out split
scored once, for a closing note, before it joined; until session 19 the table came from dev,
holdout, holdout2 and test under that session's rules); bench/accuracy/run.py --no-generate
--skip-realdata, results under /tmp, ~5 min on a quiet machine) and rewrites
analyzers/finding_calibration_table.py from all of them, with the
headline's (right, named) counts per cause category (analyzers/calibration.py
`calibrated_confidence`). Given results files instead it derives from those:

    .venv/bin/python scripts/derive_calibration.py DEV.json [HOLDOUT.json ...] [--write]
    .venv/bin/python scripts/derive_calibration.py DEV.json --evaluate HOLDOUT.json

`--evaluate` prints reliability tables (bins 0.1 wide: n, mean confidence, fraction right) of the
evaluated files' alert findings under their rules' priors and under the table derived from the
positional files: the out-of-sample check. The counts and the arithmetic are those of
analyzers/calibration.py's docstring: per (category, severity, evidence band) right / alerts,
shrunk with PSEUDO_COUNTS pseudo-counts toward the category's rate, and that toward the base rate
of all alerts. A finding is right as bench/accuracy/causes.py `finding_is_right` says (scored by
the bench and stored in the results). The rule's prior is the alert's `rule_confidence` (its
`confidence` in results written before calibration existed). Same inputs, same table: keys are
sorted and nothing depends on time or order.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE_PATH = ROOT / "analyzers" / "finding_calibration_table.py"
# The spent splits the cache keeps (each held-out one joined after its single score).
TUNING_SPLITS = (
    "dev",
    "holdout7",
    "holdout8",
    "holdout9",
    "holdout10",
    "holdout11",
    "holdout12",
    "holdout13",
    "holdout14",
    "holdout15",
    "holdout16",
    "holdout17",
    "holdout18",
    "holdout19",
    "holdout20",
    "holdout21",
    "holdout22",
    "holdout23",
    "holdout24",
)
PSEUDO_COUNTS = 2

Key = tuple[str, str, float]  # (category, severity, evidence band)


@dataclass(frozen=True)
class Scored:
    category: str
    severity: str
    rule_confidence: float
    right: bool


@dataclass(frozen=True)
class Table:
    base: tuple[float, int, int]  # (rate, right, alerts)
    by_category: dict[str, tuple[float, int, int]]
    by_evidence: dict[Key, tuple[float, int, int]]
    headlines: dict[str, tuple[int, int]]  # headline cause category -> (right, named)

    def confidence(self, alert: Scored) -> float:
        from tscope.analyzers.calibration import evidence_band

        cell = self.by_evidence.get(
            (alert.category, alert.severity, evidence_band(alert.rule_confidence))
        )
        if cell is not None:
            return cell[0]
        measured = self.by_category.get(alert.category)
        return measured[0] if measured is not None else alert.rule_confidence


def alerts_of(results: dict[str, Any]) -> list[Scored]:
    """Every alert finding of every run (controls included: all wrong there)."""
    return [
        Scored(
            str(alert["category"]),
            str(alert["severity"]),
            float(
                alert["rule_confidence"]
                if alert.get("rule_confidence") is not None
                else alert["confidence"]
            ),
            bool(alert["right"]),
        )
        for run in results["runs"]
        for alert in run["alerts"]
    ]


def headline_counts(results: Iterable[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """(right, named) per cause category the headline names; a control's headline is wrong. An
    undetermined verdict claims no cause (it states no confidence) and is not counted."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for data in results:
        for run in data["runs"]:
            category = (run.get("headline") or {}).get("category")  # the cause it names
            if category is None or category == "undetermined":
                continue
            counts[str(category)][0] += bool(run["right"]) and run["cause"] != "control"
            counts[str(category)][1] += 1
    return {c: (r, n) for c, (r, n) in sorted(counts.items())}


# No count this benchmark holds supports a certainty: a stated rate stops at 0.99.
MAX_CONFIDENCE = 0.99


def _shrunk(right: int, total: int, toward: float) -> float:
    return (right + PSEUDO_COUNTS * toward) / (total + PSEUDO_COUNTS)


def _stated(rate: float) -> float:
    return round(min(rate, MAX_CONFIDENCE), 2)


def derive(alerts: Iterable[Scored], headlines: dict[str, tuple[int, int]] | None = None) -> Table:
    from tscope.analyzers.calibration import evidence_band

    alerts = list(alerts)
    if not alerts:
        raise SystemExit("no alert findings in the results: nothing to calibrate on")
    category_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    cell_counts: dict[Key, list[int]] = defaultdict(lambda: [0, 0])
    for alert in alerts:
        for counts in (
            category_counts[alert.category],
            cell_counts[(alert.category, alert.severity, evidence_band(alert.rule_confidence))],
        ):
            counts[0] += alert.right
            counts[1] += 1
    right_all = sum(alert.right for alert in alerts)
    base = (right_all + 1) / (len(alerts) + 2)

    def cell_rate(key: Key, right: int, total: int) -> float:
        # Toward the rate of the category's other bands (shrunk toward the base rate), so a
        # cell's own alerts are not counted twice; a category of one band shrinks toward base.
        category_right, category_total = category_counts[key[0]]
        others = _shrunk(category_right - right, category_total - total, base)
        # ...but never above the cell's own Laplace estimate: a branch seen once borrowed its
        # category's 0.99 (warmup_too_short's no-warm-up branch, 1 of 1, stated 0.99 on OOD
        # block 9's healthy ood164). For cells of many alerts the two agree.
        return min(_shrunk(right, total, others), (right + 1) / (total + 2))

    return Table(
        (_stated(base), right_all, len(alerts)),
        {c: (_stated(_shrunk(r, n, base)), r, n) for c, (r, n) in sorted(category_counts.items())},
        {key: (_stated(cell_rate(key, r, n)), r, n) for key, (r, n) in sorted(cell_counts.items())},
        dict(headlines or {}),
    )


def table_source(table: Table, derived_from: str) -> str:
    """The generated module's text (deterministic: sorted keys, two-decimal rates)."""
    lines = [
        '"""Calibrated confidences of alert findings: GENERATED by scripts/derive_calibration.py,',
        "do not edit by hand (the method: analyzers/calibration.py's docstring).",
        "",
        "Derived from the bench results of",
        *(f"- {part}" for part in derived_from.split("; ")),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f"PSEUDO_COUNTS = {PSEUDO_COUNTS}",
        "# (confidence, right, alerts) over every alert finding of the runs: the base rate.",
        f"BASE_RATE: tuple[float, int, int] = {table.base!r}",
        "# category -> (confidence, right, alerts), shrunk toward BASE_RATE.",
        "BY_CATEGORY: dict[str, tuple[float, int, int]] = {",
        *(f"    {json.dumps(c)}: {v!r}," for c, v in table.by_category.items()),
        "}",
        "# (category, severity, evidence band) -> (confidence, right, alerts), shrunk toward the",
        "# category's rate.",
        "BY_EVIDENCE: dict[tuple[str, str, float], tuple[float, int, int]] = {",
        *(
            f"    ({json.dumps(k[0])}, {json.dumps(k[1])}, {k[2]!r}): {v!r},"
            for k, v in table.by_evidence.items()
        ),
        "}",
        "# headline cause category -> (right, named): how often a headline naming it was right",
        "# (a control's headline is always wrong); analyzers/calibration.py states (r+1)/(n+2).",
        "HEADLINE_RIGHT_OF_NAMED: dict[str, tuple[int, int]] = {",
        *(f"    {json.dumps(c)}: {v!r}," for c, v in table.headlines.items()),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _describe(paths: list[Path], results: list[dict[str, Any]]) -> str:
    parts = []
    for path, data in zip(paths, results, strict=True):
        runs = data["runs"]
        splits = sorted({str(r.get("split", "?")) for r in runs})
        alerts = sum(len(r["alerts"]) for r in runs)
        parts.append(f"{'+'.join(splits)}: {len(runs)} runs, {alerts} alerts ({path.name})")
    return "; ".join(parts)


def reliability(pairs: list[tuple[float, bool]]) -> list[str]:
    sys.path.insert(0, str(ROOT / "bench" / "accuracy"))
    import report  # the bench's own reliability table

    return list(report.reliability(pairs))


def score_splits() -> list[Path]:
    """Score the tuning splits with the bench (what is cached only), results under /tmp."""
    paths = []
    for split in TUNING_SPLITS:
        results = Path(f"/tmp/tscope-calibration-{split}.json")
        command = [
            sys.executable,
            str(ROOT / "bench" / "accuracy" / "run.py"),
            "--split",
            split,
            "--no-generate",
            "--skip-realdata",
            "--jobs",
            "2",
            "--results",
            str(results),
        ]
        print(f"scoring {split}: {' '.join(command)}", file=sys.stderr)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        paths.append(results)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", type=Path, help="bench results JSON to derive from")
    parser.add_argument("--score", action="store_true", help="score the spent splits first")
    parser.add_argument("--write", action="store_true", help=f"rewrite {TABLE_PATH.name}")
    parser.add_argument("--evaluate", action="append", type=Path, default=[])
    options = parser.parse_args(argv)
    paths = list(options.results) + (score_splits() if options.score else [])
    if not paths:
        parser.error("give results files or --score")
    results = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    table = derive(
        (alert for data in results for alert in alerts_of(data)), headline_counts(results)
    )
    source = table_source(table, _describe(paths, results))
    print(source)
    for path in options.evaluate:
        alerts = alerts_of(json.loads(path.read_text(encoding="utf-8")))
        print(f"## {path.name}: rules' priors")
        print("\n".join(reliability([(a.rule_confidence, a.right) for a in alerts])))
        print(f"\n## {path.name}: calibrated by the table above")
        print("\n".join(reliability([(table.confidence(a), a.right) for a in alerts])) + "\n")
    if options.write:
        TABLE_PATH.write_text(source, encoding="utf-8")
        print(f"wrote {TABLE_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
