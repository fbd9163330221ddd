"""One error hierarchy: the CLI turns a TscopeError into one line on stderr and exit code 2.

Anything that is not a TscopeError is a bug in tscope and keeps its traceback.
"""

from __future__ import annotations


class TscopeError(Exception):
    """A problem with the user's input or arguments, explained so the user can act on it."""


class UnreadableInput(TscopeError):
    """One file could not be read. Raised by readers; the pipeline records it as partial."""

    def __init__(self, path: str, problem: str, hint: str = "") -> None:
        self.path = path
        self.problem = problem
        self.hint = hint
        super().__init__(f"Cannot read {path}: {self.problem_text}")

    @property
    def problem_text(self) -> str:
        """The problem and what to do, as a partial-input note states them (the path aside)."""
        return f"{self.problem}. {self.hint}" if self.hint else self.problem


class NothingToAnalyze(TscopeError):
    """No input yielded anything analyzable."""


class UsageError(TscopeError):
    """Arguments that do not make sense together (bad --format, missing path, ...)."""


class SeveralRuns(UsageError):
    """A folder holds several unrelated runs; tscope refuses to merge them into one timeline."""
