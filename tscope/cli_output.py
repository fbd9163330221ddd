"""What the CLI shows and writes around a command: progress on a terminal, the case files.

Kept apart from tscope/cli.py, which only parses arguments and delegates.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

from tscope.model.visible_text import visible

EXIT_BAD_INPUT = 2


def fail(message: str) -> NoReturn:
    """One line on stderr and exit 2: how every command ends on bad input or arguments."""
    # visible(): a file name in the message may hold a newline or a terminal escape.
    typer.echo(f"tscope: error: {visible(message)}", err=True)
    raise typer.Exit(code=EXIT_BAD_INPUT)


def progress_enabled(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


def say_where_it_goes(target: Path, prefix: str, quiet: bool) -> None:
    """The default moved beside the run (the working directory is inside an input): say so."""
    if not quiet and target.parent != Path("."):
        # visible(): the target is named after the run folder, whose name may hold a terminal
        # escape or a bidi override (docs/security.md).
        typer.echo(
            f"tscope: writing to {visible(target)} (./{prefix}-… would be inside the input; "
            "--out DIR to choose)",
            err=True,
        )


def main_file(written: list[Path]) -> Path:
    for suffix in (".html", ".md", ".json"):
        for path in written:
            if path.suffix == suffix:
                return path
    return written[0]


class Progress:
    """A rich progress line on a terminal; silent when piped or with --quiet."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self._progress: object | None = None
        self._task: object | None = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import Progress

            progress = Progress(transient=True)
            progress.start()
            self._task = progress.add_task(self.label, total=None)
            self._progress = progress
        return self

    def update(self, description: str) -> None:
        if self._progress is not None:
            from rich.markup import escape

            # A file name is shown as text: its control characters escaped, its "[bold]" not
            # taken as rich markup.
            shown = escape(visible(description))
            self._progress.update(self._task, description=f"{self.label} {shown}")  # type: ignore[attr-defined]

    def advance(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()  # type: ignore[attr-defined]
