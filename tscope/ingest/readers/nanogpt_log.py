"""nanoGPT and modded-nanogpt stdout logs.

nanoGPT (karpathy/nanoGPT train.py) prints `iter N: loss X, time Tms, mfu P%` every log_interval
iterations and `step N: train loss X, val loss Y` at each evaluation; its configurator prints
`Overriding config with <file>:` followed by the file's `key = value` lines, and
`Overriding: key = value` for each command-line flag.

modded-nanogpt (KellerJordan/modded-nanogpt train_gpt.py) writes its own source code first, then
`step:N/T val_loss:X train_time:Tms step_avg:Sms` and, in 2024 versions, per-step
`step:N/T train_loss:X train_time:Tms step_avg:Sms`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tscope.ingest.readers.text_logs import (
    iter_lines,
    no_records_error,
    parse_config_value,
    parse_int,
    parse_number,
    sniff_matches,
)
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_names import EVAL_LOSS, LEARNING_RATE, LOSS
from tscope.model.metric_rows import MetricRows

# ---- nanoGPT -------------------------------------------------------------------------------------
_NANOGPT_ITER = re.compile(r"^\s*iter (?P<step>\d+): loss (?P<loss>[^,\s]+)(?P<rest>.*)$")
_NANOGPT_EVAL = re.compile(
    r"^\s*step (?P<step>\d+): train loss (?P<train>[^,\s]+), val loss (?P<val>[^,\s]+)"
)
# Forks append fields to the iter line: "time 12.3ms/step", "lr 6.0e-04", "tokens 1,234".
_NANOGPT_TIME = re.compile(r"\btime (?P<value>\S+?)ms")
_NANOGPT_MFU = re.compile(r"\bmfu (?P<value>\S+?)%")
_NANOGPT_LR = re.compile(r"\blr (?P<value>[^,\s]+)")
_OVERRIDE_FILE = re.compile(r"^Overriding config with (?P<file>.+):\s*$")
_OVERRIDE_FLAG = re.compile(r"^Overriding: (?P<key>[A-Za-z_]\w*) = (?P<value>.*)$")
# The lines of a config file echoed after "Overriding config with": `name = value  # comment`.
_CONFIG_ASSIGNMENT = re.compile(r"^(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>.*)$")
# The echoed file is Python and may hold imports or `if` blocks, so the echo ends at the first line
# that train.py itself prints after it, not at the first line that is not an assignment.
_AFTER_CONFIG_ECHO = re.compile(
    r"^\s*(?:Overriding|tokens per iteration|found vocab_size|Initializing|number of parameters"
    r"|iter \d|step \d)"
)
# A config file is a few dozen lines; a longer "echo" means the block's end was missed.
MAX_CONFIG_ECHO_LINES = 500
_TOKENS_PER_ITER = re.compile(r"^tokens per iteration will be: (?P<value>[\d,]+)")
# running_mfu starts at -1.0 and is printed as "-100.00%" until iteration 5 has been timed.
_MFU_NOT_YET_MEASURED = -100.0
_NANOGPT_SNIFF = re.compile(
    r"^\s*iter \d+: loss |^\s*step \d+: train loss |^Overriding config with ", re.MULTILINE
)
# Metric names for what nanoGPT's evaluation prints: its "train loss" is a fresh estimate over
# eval_iters batches, a different series from the per-iteration loss at the same step.
EVAL_TRAIN_LOSS = "eval/train_loss"
STEP_TIME_MS = "train/step_time_ms"
MFU_PERCENT = "train/mfu_percent"

# ---- modded-nanogpt ------------------------------------------------------------------------------
_MODDED_STEP = re.compile(r"^step:(?P<step>\d+)/(?P<total>\d+) (?P<rest>.*)$")
_MODDED_METRICS = {"train_loss": LOSS, "val_loss": EVAL_LOSS}
# Its logs open with the training script, whose print f-string is a cheap, certain fingerprint
# even when the step lines sit beyond the sniffed bytes.
_MODDED_SNIFF = re.compile(
    r"^step:\d+/\d+ (?:val_loss|train_loss|train_time):"
    r"|step:\{[^}\n]+\}/\{[^}\n]+\} (?:val|train)_loss:",
    re.MULTILINE,
)


class NanoGPTLogReader:
    name = "nanogpt_log"

    def can_read(self, path: Path) -> bool:
        return sniff_matches(path, _NANOGPT_SNIFF)

    def read(self, path: Path, display_path: str) -> LogRead:
        rows = MetricRows()
        config: dict[str, Any] = {}
        echo_lines_left = 0  # > 0 while inside a config file echoed by the configurator
        for line in iter_lines(path, display_path):
            if rows.full:
                break
            if echo_lines_left and not _AFTER_CONFIG_ECHO.match(line):
                echo_lines_left -= 1
                assignment = _CONFIG_ASSIGNMENT.match(line)
                if assignment:
                    config[assignment["key"]] = _config_value(assignment["value"])
                continue
            echo_lines_left = 0
            if _OVERRIDE_FILE.match(line):
                echo_lines_left = MAX_CONFIG_ECHO_LINES
            elif flag := _OVERRIDE_FLAG.match(line):
                config[flag["key"]] = parse_config_value(flag["value"])
            elif tokens := _TOKENS_PER_ITER.match(line):
                config["tokens_per_iter"] = parse_int(tokens["value"])
            elif iteration := _NANOGPT_ITER.match(line):
                _add_iteration(iteration, rows)
            elif evaluation := _NANOGPT_EVAL.match(line):
                _add_evaluation(evaluation, rows)
        if not rows and not config:
            raise no_records_error(display_path, "nanoGPT")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            caveats=_nanogpt_caveats(config, display_path),
            config=config,
            partial=[PartialInput(display_path, problem) for problem in rows.problems()],
        )


class ModdedNanoGPTLogReader:
    name = "modded_nanogpt_log"

    def can_read(self, path: Path) -> bool:
        return sniff_matches(path, _MODDED_SNIFF)

    def read(self, path: Path, display_path: str) -> LogRead:
        rows = MetricRows()
        config: dict[str, Any] = {}
        for line in iter_lines(path, display_path):
            if rows.full:
                break
            match = _MODDED_STEP.match(line)
            if match is None:
                continue
            step = parse_int(match["step"])
            if step is None:  # more digits than any step has: not a step line
                continue
            total = parse_int(match["total"])
            if total is not None:
                config["num_iterations"] = total
            # train_time and step_avg are left out: train_time is reset after the warm-up steps
            # and step_avg is derived from it, so neither is a per-step measurement.
            # `key:value` fields split on whitespace, not found by a regex: finditer of
            # `([a-z_]+):(\S+)` restarted inside every word it failed on, so one line of 200,000
            # letters took over 60 s (quadratic); splitting is linear.
            for field in match["rest"].split():
                key, _, printed = field.partition(":")
                metric = _MODDED_METRICS.get(key)
                value = parse_number(printed) if metric is not None else None
                if metric is not None and value is not None:
                    rows.add(step, metric, value, key)
        if not rows:
            raise no_records_error(display_path, "modded-nanogpt")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            caveats=_modded_caveats(rows, display_path),
            config=config,
            partial=[PartialInput(display_path, problem) for problem in rows.problems()],
        )


def _add_iteration(match: re.Match[str], rows: MetricRows) -> None:
    step = parse_int(match["step"])
    if step is None:  # more digits than any step has: not an iteration line
        return
    loss = parse_number(match["loss"])
    if loss is not None:
        rows.add(step, LOSS, loss, "loss")
    rest = match["rest"]
    if (time := _NANOGPT_TIME.search(rest)) and (ms := parse_number(time["value"])) is not None:
        rows.add(step, STEP_TIME_MS, ms, "time")
    mfu = _NANOGPT_MFU.search(rest)
    percent = parse_number(mfu["value"]) if mfu else None
    if percent is not None and percent != _MFU_NOT_YET_MEASURED:
        rows.add(step, MFU_PERCENT, percent, "mfu")
    if (lr := _NANOGPT_LR.search(rest)) and (rate := parse_number(lr["value"])) is not None:
        rows.add(step, LEARNING_RATE, rate, "lr")


def _add_evaluation(match: re.Match[str], rows: MetricRows) -> None:
    step = parse_int(match["step"])
    if step is None:  # more digits than any step has: not an evaluation line
        return
    train, val = parse_number(match["train"]), parse_number(match["val"])
    if train is not None:
        rows.add(step, EVAL_TRAIN_LOSS, train, "train loss")
    if val is not None:
        rows.add(step, EVAL_LOSS, val, "val loss")


def _config_value(text: str) -> int | float | bool | str | None:
    """A value from an echoed config file, its trailing `# comment` removed."""
    value = text.strip()
    if not value.startswith(("'", '"')):
        value = re.split(r"\s#", value, maxsplit=1)[0]
    else:
        quote = value[0]
        closing = value.find(quote, 1)
        value = value[: closing + 1] if closing > 0 else value
    return parse_config_value(value)


def _nanogpt_caveats(config: dict[str, Any], source: str) -> list[Caveat]:
    accumulation = config.get("gradient_accumulation_steps")
    window = (
        f" (gradient_accumulation_steps={accumulation})"
        if isinstance(accumulation, int) and accumulation > 1
        else ""
    )
    caveats = [
        Caveat(
            "last_microbatch_loss",
            "nanoGPT prints the loss of the last micro-batch of an iteration, scaled by the "
            f"number of accumulation steps{window}, not the mean over the whole batch: the "
            "per-iteration loss is noisier than the true batch loss.",
            source,
        )
    ]
    interval = config.get("log_interval")
    if isinstance(interval, int) and interval > 1:
        caveats.append(
            Caveat(
                "sampled_iterations",
                f"Only every log_interval={interval}th iteration is printed: a spike on the "
                "iterations in between is not visible.",
                source,
            )
        )
    return caveats


def _modded_caveats(rows: MetricRows, source: str) -> list[Caveat]:
    if not rows.has_metric(LOSS):
        return [
            Caveat(
                "no_train_loss",
                "This modded-nanogpt version prints no training loss: only the validation loss, "
                "every val_loss_every steps, is available.",
                source,
            )
        ]
    return [
        Caveat(
            "single_rank_loss",
            "modded-nanogpt prints the training loss of one rank's last micro-batch, not the "
            "all-reduced batch mean: it is noisier than the true batch loss.",
            source,
        )
    ]
