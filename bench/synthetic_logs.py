"""False alarms and recall on synthetic training logs that no producer of the benchmark writes.

    .venv/bin/python bench/synthetic_logs.py --seeds 0:200            # tune on these
    .venv/bin/python bench/synthetic_logs.py --seeds 1000:1200        # score once, after tuning
    .venv/bin/python bench/synthetic_logs.py --seeds 0:200 --show 3   # the first 3 alarms, in full

bench/accuracy trains real models, so its healthy controls share its producers' noise, schedules
and logging. Logs from elsewhere differ: longer runs, heavier-tailed or autocorrelated batch noise
(sequential data), losses averaged over a logging interval, smoothed with an EMA or rounded to a
few digits, no LR or gradient norm logged, LR schedules with other shapes. Each seed here draws one
healthy log along those axes (`draw`), writes it as a CSV or JSONL file with names real loops use,
and runs the whole analysis on it (`tscope.pipeline.analyze_run`, readers included); with
`--planted` each seed also gets one planted event (a one-step loss break with the gradient norm
spiking, a divergence, or a logged LR jump the loss answers) to measure recall on the same shapes.

A healthy log may get no warning or critical finding (false alarm otherwise, by category). A
planted log is right when its summary's headline names the planted kind at its step (±2 logged
points): the break as `bad_batch`, `loss_spike` or an undetermined cause, the divergence as `loss_divergence` (or a
cause of it), the LR jump as `lr_schedule_jump`. The exit code is 0 whatever the results: this is a
measurement, not a test. Seeds are independent: tune on one range, score another once.

tests/planted_logs.py with scripts/measure_rules.py measures single rules (plateau, gradient-norm
growth, overfitting, LR configuration) on in-memory series; this one runs the whole analysis,
readers included, on files, and scores the verdict.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synthetic_draw import NAMINGS, Draw, draw, series, write  # noqa: E402

from tscope.pipeline import analyze_run  # noqa: E402

ALERT = ("warning", "critical")
VISIBLE_SIGMA = 5.0
PLANTED_KINDS = ("break", "divergence", "lr_jump", "lr_spike", "weights_lost", "nan")
RIGHT_CATEGORIES = {
    # "undetermined": the incident found at its step, its cause left open (nothing logged can
    # tell a bad batch from a one-step LR glitch without the LR).
    "break": ("bad_batch", "loss_spike", "undetermined"),
    # No cause is planted with a divergence or a loss gone non-finite: "undetermined" at its
    # onset is the answer; a symptom named as the cause (before session 16) was scored right too.
    "divergence": ("undetermined", "loss_divergence", "lr_too_high", "lr_ramp", "grad_norm_spike"),
    "lr_jump": ("lr_schedule_jump",),
    "lr_spike": ("lr_schedule_jump",),
    "weights_lost": ("resume_discontinuity",),
    "nan": ("undetermined", "nan_loss", "loss_divergence"),
}


@dataclass
class Outcome:
    draw: Draw
    status: str
    alerts: list[tuple[str, str, int | None, str]]  # (category, severity, step, message)
    headline: tuple[str, int | None] | None
    right: bool | None  # planted only


def analyze(d: Draw) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="tscope-synthetic-") as tmp:
        folder = Path(tmp)
        write(d, series(d), folder)
        case = analyze_run(folder, read_weights=False).case
    alerts = [
        (f.category, f.severity, f.step, f.message) for f in case.findings if f.severity in ALERT
    ]
    headline = _headline(case)
    right = None
    if d.planted is not None:
        window = 2 * d.log_every
        right = bool(
            headline is not None
            and headline[0] in RIGHT_CATEGORIES[d.planted]
            and headline[1] is not None
            and d.planted_step is not None
            and d.planted_step - window <= headline[1] <= d.planted_step + d.window_after + window
        )
    return Outcome(d, str(case.summary.status), alerts, headline, right)


def _headline(case: object) -> tuple[str, int | None] | None:
    """The cause the verdict names and its finding's step (bench/accuracy/score.py headline_of)."""
    card = case.summary.card  # type: ignore[attr-defined]
    if card is None:
        return None
    by_id = {f.id: f for f in case.findings}  # type: ignore[attr-defined]
    finding = by_id.get(card.cause.finding_id)
    step = finding.step if finding is not None and finding.step is not None else card.step
    return str(card.cause.category), step


def _short(d: Draw) -> str:
    return (
        f"{d.points} pts every {d.log_every}, noise {d.noise:.3f} {d.noise_kind}, {d.smoothing}, "
        f"{d.schedule} warm-up {d.warmup_fraction}, lr {'yes' if d.lr_logged else 'no'}, "
        f"grad {'yes' if d.grad_logged else 'no'}, {NAMINGS[d.naming][0]!r} {d.fmt}"
        + (f", from step {d.start_offset}" if d.start_offset else "")
        + (", rewound once" if d.rewind else "")
        + (f", visibility {d.visibility:.1f} σ" if d.visibility is not None else "")
        + (f", {'; '.join(d.notes)}" if d.notes else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0:100", help="FIRST:LAST (LAST excluded)")
    parser.add_argument("--planted", action="store_true", help="also one planted log per seed")
    parser.add_argument("--show", type=int, default=0, help="print this many alarms in full")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split(":"))
    healthy = [analyze(draw(seed, None)) for seed in range(first, last)]
    alarmed = [o for o in healthy if o.alerts]
    by_category = Counter(c for o in alarmed for c in {a[0] for a in o.alerts})
    print(f"healthy synthetic logs, seeds {first}:{last}: {len(alarmed)}/{len(healthy)} warned")
    for category, count in by_category.most_common():
        print(f"  {category}: {count}")
    statuses = Counter(o.status for o in healthy)
    print("  statuses: " + ", ".join(f"{s} {n}" for s, n in statuses.most_common()))
    for o in alarmed[: args.show]:
        print(f"- seed {o.draw.seed}: {_short(o.draw)}")
        for category, severity, step, message in o.alerts:
            print(f"    {severity} {category} @ {step}: {message[:300]}")
    if args.planted:
        planted = [
            analyze(draw(seed, PLANTED_KINDS[seed % len(PLANTED_KINDS)]))
            for seed in range(first, last)
        ]
        for kind in PLANTED_KINDS:
            runs = [o for o in planted if o.draw.planted == kind]
            if kind == "break":  # only the breaks the log shows (≥ VISIBLE_SIGMA) are scored
                hidden = [o for o in runs if (o.draw.visibility or 0.0) < VISIBLE_SIGMA]
                runs = [o for o in runs if o not in hidden]
                print(f"planted break: {len(hidden)} not visible in the log (< {VISIBLE_SIGMA} σ)")
            hits = sum(bool(o.right) for o in runs)
            print(f"planted {kind}: headline right {hits}/{len(runs)}")
            for o in [o for o in runs if not o.right][: args.show]:
                print(
                    f"  miss seed {o.draw.seed} @ {o.draw.planted_step}: headline {o.headline}"
                    f" | {_short(o.draw)}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
