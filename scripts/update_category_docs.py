"""Rewrite docs/case-schema.md's table of finding categories from their declarations.

    .venv/bin/python scripts/update_category_docs.py

Run it after adding or changing a category (tests/test_categories.py fails until the table is
current). The table sits between the `categories:start` and `categories:end` markers.
"""

from __future__ import annotations

from pathlib import Path

from tscope.analyzers.categories import docs_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "case-schema.md"
START, END = "<!-- categories:start -->\n", "<!-- categories:end -->"


def main() -> None:
    text = DOCS.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    DOCS.write_text(before + START + docs_table() + END + after, encoding="utf-8")


if __name__ == "__main__":
    main()
