"""The benchmark's numbers as Markdown: docs/accuracy.md and the console summary."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

import causes
from score import VISIBLE_SIGMA, RealLogScore, RunScore
from spec import ALL_CAUSES, BAD_BATCH, CONTROL, PRODUCERS

CONFIDENCE_BINS = tuple(round(0.1 * i, 1) for i in range(11))


def _pct(right: int, total: int) -> str:
    return f"{right}/{total} ({100.0 * right / total:.0f}%)" if total else "–"


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def said(run: RunScore) -> str:
    """What the headline said, in one cell."""
    h = run.headline
    if h.status == "error":
        return f"error: {run.error.splitlines()[0][:80]}"
    if h.status != "incident":
        return h.status
    conf = f" {h.confidence:.2f}" if h.confidence is not None else ""
    first = f" (F1 {h.headline_category})" if h.headline_category not in (None, h.category) else ""
    return f"{h.category} @ {h.step}{conf}{first}"


def is_visible(run: RunScore) -> bool:
    return bool(
        run.visibility is not None and run.visibility >= VISIBLE_SIGMA and run.largest_excursion
    )


def headline_by_producer(runs: list[RunScore]) -> list[str]:
    rows = []
    for producer in (*PRODUCERS, "all"):
        mine = [r for r in runs if producer in ("all", r.producer)]
        planted = [r for r in mine if r.cause != CONTROL]
        controls = [r for r in mine if r.cause == CONTROL]
        if not mine:
            continue
        recorded = [r for r in planted if r.recorded]
        rows.append(
            [
                producer,
                _pct(sum(r.right for r in planted), len(planted)),
                _pct(sum(r.right for r in recorded), len(recorded)),
                _pct(sum(r.right for r in controls), len(controls)),
                _pct(sum(r.right for r in mine), len(mine)),
            ]
        )
    return _table(
        [
            "producer",
            "planted: headline right",
            "planted, cause recorded: headline right",
            "controls: no incident",
            "all runs",
        ],
        rows,
    )


def recall_by_cause(runs: list[RunScore]) -> list[str]:
    rows = []
    for cause in ALL_CAUSES:
        mine = [r for r in runs if r.cause == cause]
        if not mine:
            continue
        wrong = Counter(said(r).split(" @ ")[0].split(" (")[0] for r in mine if not r.right)
        instead = ", ".join(f"{name} ×{count}" for name, count in wrong.most_common(4))
        per_producer = " ".join(
            f"{p.split('_')[-1]} {sum(r.right for r in mine if r.producer == p)}/"
            f"{sum(1 for r in mine if r.producer == p)}"
            for p in PRODUCERS
            if any(r.producer == p for r in mine)
        )
        rows.append(
            [cause, _pct(sum(r.right for r in mine), len(mine)), per_producer, instead or "–"]
        )
        if cause == BAD_BATCH:
            visible = [r for r in mine if is_visible(r)]
            rows.append(
                [
                    f"{cause}, visible in the log only",
                    _pct(sum(r.right for r in visible), len(visible)),
                    f"{len(visible)} of {len(mine)} visible",
                    "visible: ≥ 5 robust σ over the local trend and the run's largest excursion",
                ]
            )
            recorded = [r for r in mine if r.recorded]
            rows.append(
                [
                    f"{cause}, cause recorded only",
                    _pct(sum(r.right for r in recorded), len(recorded)),
                    f"{len(recorded)} of {len(mine)} recorded",
                    "recorded: a corrupted row in the logged loss and ≥ 5 robust σ over the local "
                    "trend (score.cause_recorded)",
                ]
            )
    return _table(
        [
            "planted cause",
            "recall (headline right)",
            "per producer",
            "headline instead (wrong runs)",
        ],
        rows,
    )


def precision_by_category(runs: list[RunScore]) -> list[str]:
    named: dict[str, list[RunScore]] = defaultdict(list)
    for run in runs:
        if run.headline.status == "incident" and run.headline.category:
            named[run.headline.category].append(run)
    rows = []
    for category in sorted(named, key=lambda c: -len(named[c])):
        mine = named[category]
        on_controls = sum(r.cause == CONTROL for r in mine)
        planted = Counter(r.cause for r in mine if r.cause != CONTROL)
        rows.append(
            [
                category,
                _pct(sum(r.right for r in mine), len(mine)),
                str(on_controls),
                ", ".join(f"{c} ×{n}" for c, n in planted.most_common(4)) or "–",
            ]
        )
    return _table(
        [
            "headline cause category",
            "precision (right / named)",
            "on controls",
            "planted causes of those runs",
        ],
        rows,
    )


def control_alarms(runs: list[RunScore]) -> list[str]:
    rows = []
    for producer in (*PRODUCERS, "all"):
        controls = [r for r in runs if r.cause == CONTROL and producer in ("all", r.producer)]
        if not controls:
            continue
        alarmed = [r for r in controls if r.alerts]
        categories = Counter(a.category for r in controls for a in r.alerts)
        rows.append(
            [
                producer,
                str(len(controls)),
                _pct(len(alarmed), len(controls)),
                str(sum(len(r.alerts) for r in controls)),
                ", ".join(f"{c} ×{n}" for c, n in categories.most_common()) or "–",
            ]
        )
    return _table(["producer", "controls", "with a warning/critical", "alerts", "categories"], rows)


def real_log_alarms(real: list[RealLogScore]) -> list[str]:
    alarmed = [r for r in real if r.alerts or r.status == "error"]
    categories = Counter(c for r in real for c, _, _ in r.alerts)
    lines = [
        f"{len(real)} healthy real logs (`score.HEALTHY_REAL_LOGS`); with a warning/critical: "
        f"{_pct(len([r for r in real if r.alerts]), len(real))}; errors: "
        f"{sum(r.status == 'error' for r in real)}; alerts by category: "
        + (", ".join(f"{c} ×{n}" for c, n in categories.most_common()) or "none")
        + ".",
        "",
    ]
    if alarmed:
        lines += _table(
            ["log", "status", "alerts (category severity @ step)"],
            [
                [
                    r.path.split("realdata/")[-1],
                    r.status,
                    (r.error or "; ".join(f"{c} {s} @ {st}" for c, s, st in r.alerts[:4]))
                    + (f" (+{len(r.alerts) - 4})" if len(r.alerts) > 4 else ""),
                ]
                for r in alarmed
            ],
        )
    return lines


def _bin(confidence: float) -> int:
    return min(int(confidence * 10), 9)


def reliability(pairs: list[tuple[float, bool]]) -> list[str]:
    bins: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for confidence, right in pairs:
        bins[_bin(confidence)].append((confidence, right))
    rows = []
    for index in range(10):
        mine = bins.get(index, [])
        if not mine:
            continue
        mean = sum(c for c, _ in mine) / len(mine)
        fraction = sum(r for _, r in mine) / len(mine)
        rows.append(
            [
                f"[{CONFIDENCE_BINS[index]:.1f}, {CONFIDENCE_BINS[index + 1]:.1f}{']' if index == 9 else ')'}",
                str(len(mine)),
                f"{mean:.2f}",
                f"{fraction:.2f}",
                f"{fraction - mean:+.2f}",
            ]
        )
    return _table(["confidence", "n", "mean confidence", "fraction right", "gap"], rows)


def calibration(runs: list[RunScore]) -> list[str]:
    headline_pairs = [
        (float(r.headline.confidence), r.right)
        for r in runs
        if r.headline.status == "incident" and r.headline.confidence is not None
    ]
    alert_pairs = [(a.confidence, a.right) for r in runs for a in r.alerts]
    return [
        "Headline cause (summary card's confidence; right = the headline names the planted cause "
        "in its window; on a control every headline is wrong):",
        "",
        *reliability(headline_pairs),
        "",
        "Every warning/critical finding (right = it names the planted cause in its window, or is "
        "a symptom of it in the cause's window, `causes.finding_is_right`; on a control none is "
        "right):",
        "",
        *reliability(alert_pairs),
    ]


def mapping_table() -> list[str]:
    rows = []
    for cause in ALL_CAUSES:
        extra = "; ".join(
            f"{producer}: + {', '.join(sorted(cats))}"
            for (c, producer), cats in causes.EXTRA_BY_PRODUCER.items()
            if c == cause
        )
        rows.append(
            [cause, ", ".join(sorted(causes.ACCEPTED[cause])) + (f" ({extra})" if extra else "")]
        )
    return _table(["planted cause", "headline categories that count as right"], rows)


def per_run(runs: list[RunScore]) -> list[str]:
    return _table(
        [
            "run",
            "planted",
            "step",
            "headline (cause @ step confidence)",
            "right",
            "alerts",
            "visibility σ",
        ],
        [
            [
                r.name,
                r.cause,
                str(r.planted_step if r.planted_step is not None else "–"),
                said(r),
                "yes" if r.right else "**no**",
                str(len(r.alerts)),
                "–"
                if r.visibility is None
                else f"{r.visibility:.1f}"
                + ("" if r.largest_excursion else " (not largest)")
                + ("" if r.recorded else " (not recorded)"),
            ]
            for r in runs
        ],
    )


def markdown(runs: list[RunScore], real: list[RealLogScore], split: str, context: str) -> list[str]:
    return [
        f"Split scored: **{split}** — {len(runs)} runs "
        f"({sum(r.cause != CONTROL for r in runs)} planted, {sum(r.cause == CONTROL for r in runs)} "
        f"controls). {context}",
        "",
        "### Headline accuracy per producer",
        "",
        *headline_by_producer(runs),
        "",
        "### Per planted cause (recall)",
        "",
        *recall_by_cause(runs),
        "",
        "### Per headline category (precision)",
        "",
        *precision_by_category(runs),
        "",
        "### False warnings on healthy controls",
        "",
        *control_alarms(runs),
        "",
        "### False warnings on the healthy real logs",
        "",
        *real_log_alarms(real),
        "",
        "### Calibration (reliability tables)",
        "",
        *calibration(runs),
    ]
