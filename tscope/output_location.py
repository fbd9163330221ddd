"""Where a command writes: never under an input directory, never over or around an input file,
and a default that respects that rule wherever the user stands.

The default is `./<prefix>-<name>` in the working directory. When the user runs tscope from
inside the run (`cd myrun && tscope analyze .`), that folder would land inside the input, so the
default moves beside the outermost input holding it (`../tscope-case-myrun`); the CLI prints the
path it chose.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tscope.errors import UsageError
from tscope.model.visible_text import SURROGATES

# Default output folders: ./tscope-case-<run>, ./tscope-cluster-<dir>, ./tscope-xray-<name>.
CASE_PREFIX = "tscope-case"
CLUSTER_PREFIX = "tscope-cluster"
XRAY_PREFIX = "tscope-xray"


def _protected_by(out: Path, input_path: Path) -> bool:
    """Would writing the folder `out` land under the input directory, or on the input file or
    into the folder that holds it? (A sibling folder of an input file is fine; its own folder is
    not: the case files would mix with the run's, and the next analysis of it would read them.)"""
    resolved, root = out.resolve(), input_path.resolve()
    if root.is_dir():
        return resolved == root or root in resolved.parents
    return resolved in (root, root.parent) or root in resolved.parents


def check_outside_inputs(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output folder under an input directory, or that is an input file or its folder."""
    for path in inputs:
        if _protected_by(out, path):
            raise UsageError(
                f"--out {out} is inside the input {path}; tscope never writes into an input. "
                "Choose an output directory elsewhere."
            )


def default_output(prefix: str, name: str, inputs: Sequence[Path]) -> Path:
    """`./<prefix>-<name>`, or, when that lies inside an input directory, the same folder name
    beside the outermost input directory that holds it (relative to the working directory
    when it can be, so the printed path stays short)."""
    candidate = Path(f"{prefix}-{folder_name(name)}")
    directories = [p.resolve() for p in inputs if p.resolve().is_dir()]
    holding = [d for d in directories if _protected_by(candidate, d)]
    if holding:
        outermost = min(holding, key=lambda d: len(d.parts))
        if outermost.parent == outermost:
            raise UsageError(
                f"The input {outermost} is the filesystem root; pass --out DIR to say where to "
                "write."
            )
        candidate = _shortest(outermost.parent / candidate.name)
    check_outside_inputs(candidate, inputs)  # a file input may still sit in the way
    return candidate


def folder_name(name: str) -> str:
    """A run's name as part of a default folder name, with each byte of a name that is not UTF-8
    (a lone surrogate) as `_`: a run folder named `$'\\xffrun'` once gave `tscope-case-\\xffrun/`,
    a name no report or UTF-8 terminal could print. Other characters stay (they are shown
    escaped by `visible()` where the path is printed)."""
    return SURROGATES.sub("_", name) or "run"


def _shortest(path: Path) -> Path:
    """`path` relative to the working directory when it is above it (`../x`), else absolute."""
    here = Path.cwd().resolve()
    for levels, ancestor in enumerate([here, *here.parents]):
        if path.parent == ancestor:
            return Path(*([".."] * levels), path.name) if levels else Path(path.name)
    return path


def report_folder(case_dir: Path, out: Path | None) -> Path:
    """Where `tscope report` writes: the case's own folder (re-rendering in place keeps the
    case's other files), or another folder made ready to hold only this case."""
    from tscope.output_writer import prepare_case_folder

    source = case_dir if case_dir.is_dir() else case_dir.parent
    target = out or source
    same = target.exists() and target.resolve() == source.resolve()
    if not same:
        prepare_case_folder(target)
    return target
