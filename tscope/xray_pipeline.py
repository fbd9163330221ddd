"""audit(...) -> XrayAudit: the token audit and its findings; case_with_xray() puts them into a
case; run(request) is `tscope xray` as one call.

    audit_result = audit(entry="xray_entry.py", lengths=(5, 9, 3, 12, 7, 4))
    case = case_with_xray(audit_result)
    write_xray_file(audit_result, Path("case-dir"))      # tscope.output_writer

With an entry the audit needs no run: the case holds only the audit's findings. With a run
directory (a Hugging Face Trainer run) the case is the run's analysis with the audit's findings
ranked in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tscope.errors import UsageError
from tscope.model import Case, Finding
from tscope.model.xray import XrayResult
from tscope.model.xray_section import XraySection
from tscope.output_location import XRAY_PREFIX, check_outside_inputs, default_output
from tscope.output_writer import FORMATS, XRAY_JSON, write_case, write_xray_file
from tscope.xray.probe import DEFAULT_LENGTHS


@dataclass(frozen=True)
class XrayRequest:
    """What `tscope xray` was asked (the CLI's options, parsed)."""

    run_dir: Path | None  # a Trainer run: audited itself, or the run whose case gets the findings
    entry: Path | None  # an entry file defining train_step(model, sequences)
    lengths: Sequence[int] | None = None  # the probe batch's sequence lengths
    out: Path | None = None  # None: ./tscope-xray-<entry or run>
    formats: tuple[str, ...] = FORMATS
    on_default_folder: Callable[[Path], None] | None = None  # told the folder chosen for it


@dataclass(frozen=True)
class XrayOutcome:
    audit: XrayAudit
    case: Case
    written: list[Path]


def run(request: XrayRequest) -> XrayOutcome:
    """`tscope xray` as one call: the audit, its case and the case folder's files."""
    named = request.entry if request.entry is not None else request.run_dir
    if named is None:
        raise UsageError(
            "Give --entry FILE.py (defining train_step(model, sequences)) or a Hugging Face "
            "Trainer run directory."
        )
    inputs = [request.run_dir] if request.run_dir is not None else []
    if request.out is not None:
        check_outside_inputs(request.out, inputs)
    target = request.out or default_output(XRAY_PREFIX, named.resolve().stem, inputs)
    if request.out is None and request.on_default_folder is not None:
        request.on_default_folder(target)
    audit_result = audit(request.run_dir, request.entry, request.lengths)
    case = case_with_xray(audit_result)
    written = write_case(case, target, request.formats)
    written.append(write_xray_file(audit_result, target))
    return XrayOutcome(audit_result, case, written)


@dataclass
class XrayAudit:
    result: XrayResult
    findings: list[Finding]
    run_dir: str | None  # the Trainer run audited, None for an entry on its own


def audit(
    run_dir: str | Path | None = None,
    entry: str | Path | None = None,
    lengths: Sequence[int] | None = None,
) -> XrayAudit:
    """The entry's train_step when given, else the Trainer run's own step."""
    from tscope.analyzers.xray import xray_findings
    from tscope.xray.api import xray_entry

    if entry is not None:
        result = xray_entry(entry, lengths or DEFAULT_LENGTHS)
    elif run_dir is not None:
        from tscope.xray.trainer_run import xray_trainer_run

        result = xray_trainer_run(run_dir, lengths)
    else:
        raise UsageError(
            "tscope xray needs --entry FILE.py defining train_step(model, sequences), or a "
            "Hugging Face Trainer run directory."
        )
    return XrayAudit(result, xray_findings(result), str(run_dir) if run_dir else None)


def case_with_xray(audit_result: XrayAudit) -> Any:
    """The run's case (or an empty one) with the audit's findings and an `xray` section."""
    from tscope.errors import NothingToAnalyze
    from tscope.ingest.assemble import assemble_run
    from tscope.pipeline import analyze_run, build_case

    case = None
    if audit_result.run_dir is not None:
        try:
            case = analyze_run(
                audit_result.run_dir, read_weights=False, extra_findings=audit_result.findings
            ).case
        except NothingToAnalyze:
            case = None  # a run dir with no logs: the audit stands on its own
    if case is None:
        source = audit_result.result.source
        name = Path(source).stem if audit_result.run_dir is None else Path(source).name
        run = assemble_run(name, source, [], [])
        case = build_case(run, [], None, audit_result.findings)
        case.limits = [line for line in case.limits if not line.startswith("Logs only")]
    case.xray = XraySection.of(audit_result.result, files=(XRAY_JSON,))
    case.limits.append(XRAY_LIMIT)
    audit_sentence = _audit_sentence(case, audit_result.result)
    if audit_result.run_dir is None:
        # An entry on its own: the audit is the whole analysis, and "insufficient data, log the
        # loss" would send the reader after logs an entry never has.
        if case.summary.status in ("healthy", "insufficient_data"):
            case.summary = replace(
                case.summary,
                status="healthy",
                verdict=audit_sentence,
                next_steps=(),
                missing=None,
            )
    elif case.summary.headline_finding not in {f.id for f in case.findings if f.source == "xray"}:
        # A run's own logs lead its verdict; the audit the user asked for comes first.
        verdict = f"{audit_sentence} The run's logs: {case.summary.verdict}"
        case.summary = replace(case.summary, verdict=verdict)
    return case


def _audit_sentence(case: Case, result: XrayResult) -> str:
    """The audit's result in one sentence: its first warning, else its note, else clean."""
    from tscope.model.categories import ALERT_SEVERITIES

    audit = [f for f in case.findings if f.source == "xray"]
    alerts = [f for f in audit if f.severity in ALERT_SEVERITIES]
    if alerts:
        return f"Token audit: {alerts[0].message}"
    if audit:
        return f"Token audit: no warning. {audit[0].message}"
    return clean_verdict(result)


def clean_verdict(result: XrayResult) -> str:
    """The first sentence of a clean audit (no logs to judge, nothing found)."""
    intended = result.fit(result.intended)
    deviation = f"{intended.max_deviation:.1e}" if intended is not None else "n/a"
    return (
        f"Token audit clean: every target token weighs as the intended {result.intended} "
        f"(max deviation {deviation}) and no gradient leaks between the {len(result.lengths)} "
        "sequences of the probe batch."
    )


# What the audit cannot see, in the reader's words (the case's limits list).
XRAY_LIMIT = (
    "The token audit reads the gradient the step's backward leaves on a random-weight tracer: it "
    "cannot see gradient clipping or the optimizer step, nor anything that depends on a trained "
    "model's state."
)
