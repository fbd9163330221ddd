"""The finding vocabulary shared by every layer: severities, roles, and the record a finding
category is declared with.

The categories themselves are declared by the modules that produce them: each explainer's
`defines` (analyzers/explainers/, analyzers/replay/) and the cluster and xray modules'
`CATEGORIES`. `tscope.analyzers.categories` collects them into one `CategoryTable` (the model
may not import analyzers, so the table is built there from these types); docs/case-schema.md's
category table is generated from it (scripts/update_category_docs.py).

Roles:
- `cause`: explains an incident (an LR jump, a faulty resume); ranks above the incident's own
  description at equal severity and is credited to an incident it precedes.
- `symptom`: describes an incident (a spike, a divergence). Symptoms of one incident rank by
  their `symptom_order`, lowest (the most severe description) first.
- `context`: everything else (checkpoint statistics, replay and xray notes).

`standalone` conditions are their own news (a plateau, overfitting): when one heads the findings
the first screen describes it rather than an unrelated incident nearby.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Most severe first: the one definition every module orders and compares severities by.
SEVERITIES = ("critical", "warning", "info")
# The severities that make a run "not healthy" and that the first screen and the story report.
ALERT_SEVERITIES = ("critical", "warning")
ROLES = ("cause", "symptom", "context")
# Where a finding is produced (Finding.source).
SOURCES = ("logs", "checkpoints", "replay", "cluster", "xray")
# The sources that observed a cause rather than inferred it: a replay re-ran the steps and saw
# the batch and the state. Of two findings in the same role for one incident, an observed one
# ranks first whatever the other's confidence (a logs rule states a benchmark rate, a replay rule
# its own: the two are not comparable).
OBSERVING_SOURCES = ("replay",)


def severity_rank(severity: str) -> int:
    """0 for the most severe; a lower rank sorts first."""
    return SEVERITIES.index(severity)


def evidence_rank(source: str) -> int:
    """0 for a source that observed what it reports (OBSERVING_SOURCES), 1 for one that infers it."""
    return 0 if source in OBSERVING_SOURCES else 1


def at_least(severity: str, threshold: str) -> bool:
    """Whether `severity` is `threshold` or worse (`--fail-on`)."""
    return severity_rank(severity) <= severity_rank(threshold)


@dataclass(frozen=True)
class Category:
    id: str
    role: str  # one of ROLES
    severity: str  # the usual severity; a rule may lower or raise it with the evidence
    source: str  # one of SOURCES: where it is produced
    words: str  # the cause (or the event) in an engineer's words, for the verdict and card
    docs: str  # one line for docs/case-schema.md's table
    story_signal: str | None = None  # the StoryEvent.signal it adds to an incident's story
    standalone: bool = False
    # Symptoms only: an incident's descriptions rank by this, lowest first (gaps of 10 leave room).
    symptom_order: int | None = None


class CategoryTable:
    """Lookups over a set of category records, each id declared once."""

    def __init__(self, records: Iterable[Category]) -> None:
        self.records = tuple(records)
        self._by_id: dict[str, Category] = {}
        for record in self.records:
            if record.id in self._by_id:
                raise ValueError(f"finding category {record.id!r} is declared twice")
            self._by_id[record.id] = record
        self.causes = tuple(c.id for c in self.records if c.role == "cause")
        symptoms = [c for c in self.records if c.role == "symptom"]
        self.symptoms = tuple(
            c.id for c in sorted(symptoms, key=lambda c: (c.symptom_order is None, c.symptom_order))
        )
        self.standalone = tuple(c.id for c in self.records if c.standalone)

    def get(self, category_id: str) -> Category | None:
        return self._by_id.get(category_id)

    def words(self, category_id: str) -> str:
        """The category in words; an unregistered id reads as itself with spaces."""
        entry = self._by_id.get(category_id)
        return entry.words if entry is not None else category_id.replace("_", " ")

    def story_signal(self, category_id: str) -> str | None:
        entry = self._by_id.get(category_id)
        return entry.story_signal if entry is not None else None

    def ranking_role(self, category_id: str) -> int:
        """0 for causes, then symptoms in their order, then everything else."""
        if category_id in self.causes:
            return 0
        if category_id in self.symptoms:
            return 1 + self.symptoms.index(category_id)
        return 1 + len(self.symptoms)
