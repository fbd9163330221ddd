"""llm.c's log file (`-o DIR` writes DIR/main.log; karpathy/llm.c llmc/logger.h).

One record per line, the step first, in the logger's own short keys:

    s:100 trl:3.2815 lr:0.000600 norm:1.23      logger_log_train: train loss, LR, gradient norm
    s:250 tel:3.3012                            logger_log_val: validation loss
    s:250 eval:0.2950                           logger_log_eval: HellaSwag accuracy (not a loss)

The older train_gpt2.cu wrote `s:%d trl:%f` and `s:%d tel:%f` only. Steps are written as the loop
counts them (from 0). Its stdout (`step    1/100 | train loss …`) is read by step_lines.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from tscope.ingest.readers.text_logs import (
    iter_lines,
    no_records_error,
    parse_number,
    sniff_matches,
)
from tscope.model import LogRead, PartialInput
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.model.metric_rows import MetricRows

_RECORD = re.compile(r"^s:(?P<step>\d{1,16})(?P<fields>(?: [a-z]{1,8}:\S{1,40}){1,8})\s*$")
_FIELD = re.compile(r" (?P<key>[a-z]{1,8}):(?P<value>\S{1,40})")
_SNIFF = re.compile(r"^s:\d{1,16} (?:trl|tel|eval):", re.MULTILINE)
# The logger's keys; `eval` is the HellaSwag accuracy, kept under its own name, never a loss.
HELLASWAG_ACCURACY = "eval/hellaswag_accuracy"
_SERIES = {
    "trl": LOSS,
    "tel": EVAL_LOSS,
    "lr": LEARNING_RATE,
    "norm": GRAD_NORM,
    "eval": HELLASWAG_ACCURACY,
}


class LlmcLogReader:
    name = "llmc_log"

    def can_read(self, path: Path) -> bool:
        return sniff_matches(path, _SNIFF)

    def read(self, path: Path, display_path: str) -> LogRead:
        rows = MetricRows()
        for line in iter_lines(path, display_path):
            if rows.full:
                break
            record = _RECORD.match(line)
            if record is None:
                continue
            step = int(record["step"])
            for field in _FIELD.finditer(record["fields"]):
                series = _SERIES.get(field["key"])
                value = parse_number(field["value"])
                if series is not None and value is not None:
                    rows.add(step, series, value, field["key"])
        if not rows:
            raise no_records_error(display_path, "llm.c")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            partial=[PartialInput(display_path, problem) for problem in rows.problems()],
        )
