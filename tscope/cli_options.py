"""Options several commands share, and the parsing of option values (formats, windows).

Kept apart from tscope/cli.py so that it holds the commands alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tscope import __version__
from tscope.errors import UsageError
from tscope.output_writer import FORMATS

QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress or warnings on stderr.")
]
FormatsOption = Annotated[
    str,
    typer.Option("--format", "-f", metavar="FORMATS", help="Comma-separated: html, md, json."),
]
TrustPickleOption = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="DANGEROUS: unpickle legacy files (runs code from them). Only for files you trust.",
    ),
]
NoWeightsOption = Annotated[
    bool,
    typer.Option(
        "--no-weights", help="Skip checkpoint tensors: logs and checkpoint inventory only."
    ),
]


# Where the case goes when --out is not given (see tscope.output_location.default_output).
CaseOutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        metavar="DIR",
        help="Case directory to write (default: ./tscope-case-RUN, or beside the run when you "
        "are inside it).",
    ),
]


def parse_formats(text: str) -> tuple[str, ...]:
    formats = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(
            f"Unknown format {', '.join(unknown) or text!r}; use any of html, md, json."
        )
    return formats


def parse_window(text: str) -> tuple[int, int]:
    before, sep, after = text.partition(":")
    try:
        low, high = int(before), int(after)
    except ValueError:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER, e.g. -5:5.") from None
    if not sep or low > 0 or high < 0:
        raise UsageError(f"--window {text!r}: use -BEFORE:+AFTER around --around, e.g. -5:5.")
    return low, high


def print_version(wanted: bool) -> None:
    """--version: eager, so it answers before any command runs."""
    if wanted:
        typer.echo(f"tscope {__version__}")
        raise typer.Exit()
