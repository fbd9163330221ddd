"""The normalized run and case model: plain frozen dataclasses and one long-form metric table.

Nothing in this package imports from the rest of tscope; readers produce it, analyzers consume it,
renderers print it.
"""

from tscope.model.case import (
    Alternative,
    Case,
    ChangePoint,
    CheckpointInfo,
    Finding,
    Spike,
    StoryEvent,
)
from tscope.model.run import (
    METRIC_COLUMNS,
    Caveat,
    LogRead,
    PartialInput,
    Run,
    RunEvent,
    Source,
    empty_metric_table,
)

__all__ = [
    "METRIC_COLUMNS",
    "Alternative",
    "Case",
    "Caveat",
    "ChangePoint",
    "CheckpointInfo",
    "Finding",
    "LogRead",
    "PartialInput",
    "Run",
    "RunEvent",
    "Source",
    "Spike",
    "StoryEvent",
    "empty_metric_table",
]
