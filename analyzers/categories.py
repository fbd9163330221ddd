"""Every finding category tscope emits, collected from where each is declared.

A category is declared once, by the module that produces it: an explainer's `defines` (in
EXPLAINERS, analyzers/__init__.py, or REPLAY_EXPLAINERS, analyzers/replay/__init__.py), or the
cluster and xray analyses' `CATEGORIES`. An explainer that emits a category another one declares
lists it in `categories` only. Ranking, the story, the summary, the incident card and the causes
read the table here; the record type and the severity order are the model's
(tscope/model/categories.py), and docs/case-schema.md's table is generated from `docs_table()`
(scripts/update_category_docs.py; tests/test_categories.py checks it is current).
"""

from __future__ import annotations

from tscope.analyzers import EXPLAINERS
from tscope.analyzers.cluster import CATEGORIES as CLUSTER_CATEGORIES
from tscope.analyzers.replay import REPLAY_EXPLAINERS
from tscope.analyzers.xray import CATEGORIES as XRAY_CATEGORIES
from tscope.model.categories import ROLES, Category, CategoryTable

TABLE = CategoryTable(
    (
        *(record for explainer in EXPLAINERS for record in explainer.defines),
        *(record for explainer in REPLAY_EXPLAINERS for record in explainer.defines),
        *XRAY_CATEGORIES,
        *CLUSTER_CATEGORIES,
    )
)
CATEGORIES: tuple[Category, ...] = TABLE.records
CAUSES = TABLE.causes
SYMPTOMS = TABLE.symptoms
STANDALONE = TABLE.standalone
category = TABLE.get
words = TABLE.words
story_signal = TABLE.story_signal
ranking_role = TABLE.ranking_role


def docs_table() -> str:
    """The Markdown table of every category for docs/case-schema.md: causes, then symptoms in
    their ranking order, then context, each group in registry order."""
    rows = [
        "| category | role | usual severity | source | what it means |",
        "|---|---|---|---|---|",
    ]
    order = {category_id: position for position, category_id in enumerate(SYMPTOMS)}
    for role in ROLES:
        group = [record for record in CATEGORIES if record.role == role]
        if role == "symptom":
            group.sort(key=lambda record: order[record.id])
        rows.extend(
            f"| `{r.id}` | {r.role} | {r.severity} | {r.source} | {_cell(r.docs)} |" for r in group
        )
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a literal bar (|activation|) would end the table cell
