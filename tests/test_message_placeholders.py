"""No finding text shows a placeholder: a string literal concatenated into an f-string without its
own `f` keeps `{NAME}` verbatim (a bad-batch rule once read "its excess ≥ {DOMINANCE_WITH_GRADIENT}×"
in every case file). Read from the source, so it covers rules no fixture triggers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_.]*(\[[^\]]*\])?(![rsa])?(:[^{}]*)?\}")


def _unformatted_parts(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.JoinedStr):
            continue
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                match = PLACEHOLDER.search(part.value)
                if match:
                    found.append((node.lineno, match.group(0)))
    return found


def test_no_f_string_carries_an_unformatted_placeholder():
    offenders = []
    for folder in ("tscope", "analyzers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.is_symlink() or any(p.is_symlink() for p in path.parents if p != ROOT):
                continue  # tscope/analyzers is a link to analyzers/: read once
            for line, text in _unformatted_parts(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert offenders == []


def test_the_check_finds_a_missing_f():
    source = 'LIMIT = 3\ntext = (f"at most {LIMIT} " "and at least {LIMIT}")\n'
    assert _unformatted_parts(source) == [(2, "{LIMIT}")]
    assert _unformatted_parts('text = f"at most {LIMIT}"\n') == []
