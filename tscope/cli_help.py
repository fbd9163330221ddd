"""How the CLI's --help reads: placeholders a person types (`PATH...`, `DIR`, `STEP`, `FILE.py`),
not the Python types typer shows by default (`<list[Path]>`, `{paths}...`, `<bool>` on a flag).

Kept apart from tscope/cli.py, which only parses arguments and delegates. Contexts and
parameters are typed `Any`: typer builds them from its own vendored copy of click.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


class PlainArgument(TyperArgument):
    """An argument shown by its metavar alone: `PATH...` when required, `[RUN_DIR]` when not."""

    def display_type(self, ctx: Any) -> str:
        return ""  # the metavar already says what to type

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        repeated = "..." if self.nargs != 1 and not name.endswith("...") else ""
        return f"{name}{repeated}" if self.required else f"[{name}]{repeated}"


class PlainFlag(TyperOption):
    """A flag takes no value: no `<bool>` beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _plain(params: list[Any]) -> None:
    """Typer builds the parameters; this only changes how they print."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = PlainArgument
        elif type(param) is TyperOption and param.is_flag:
            param.__class__ = PlainFlag


class PlainCommand(TyperCommand):
    """A command whose arguments and flags are shown as above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _plain([option] if option is not None else [])
        return option


class PlainGroup(TyperGroup):
    """`tscope` itself: its --version and --help are flags too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _plain([option] if option is not None else [])
        return option
