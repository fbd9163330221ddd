"""Every file a command writes, in one place: one JSON encoding, the parquet tables, the case folder.

    write_case(case, Path("tscope-case-exp1"), ("html", "md", "json"))   # + layers.parquet
    write_json(folder / "replay.json", payload, round_floats=False)

The bytes go through tscope.output_files (never through a link, only into a folder tscope owns);
this module decides what the bytes are. JSON is always `json_text`: sorted keys, UTF-8 as is, no
NaN literal, a trailing newline, so the same result always gives the same bytes. Two choices
remain per file and are named where the file is written: `round_floats` (json_safe: 6 significant
digits and NaN/Inf as strings — the case and the reports; replay.json keeps full precision for its
fidelity numbers) and `compact` (the cluster's per-run cache, where the indented encoder's pure
Python dominates a 1,000-run sweep).

render/ renders the report files (case.*, cluster.* and their charts) as texts, case.json's and
cluster.json's from json_text, and hands them to write_texts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.output_files import prepare_folder, write_text, write_with

if TYPE_CHECKING:
    import pandas as pd

    from tscope.model import Case
    from tscope.replay_pipeline import Investigation
    from tscope.xray_pipeline import XrayAudit

FORMATS = ("html", "md", "json")  # the case's and the cluster report's files: --format
LAYERS_PARQUET = "layers.parquet"
REPLAY_JSON = "replay.json"
STEPS_TABLE = "replay_steps.parquet"
LAYERS_TABLE = "replay_layers.parquet"
SAMPLES_TABLE = "replay_samples.parquet"
XRAY_JSON = "xray.json"

# Every name tscope writes into a case folder (analyze, replay, report), as globs. A folder holding
# anything else is someone else's and is refused; these are removed before a new case is written,
# so nothing of an earlier case (its layers.parquet, its case-layers.svg) stays beside it.
CASE_FOLDER_FILES = (
    "case.json",
    "case.html",
    "case.md",
    "case-*.svg",  # the charts: tscope.render.ALL_CHART_FILES
    LAYERS_PARQUET,
    REPLAY_JSON,  # tscope replay: write_replay_files
    "replay_*.parquet",
    "skip_batches.json",
    XRAY_JSON,  # tscope xray: write_xray_file
)
WHAT_A_CASE_IS = "the case"


def json_text(payload: Any, *, round_floats: bool = True, compact: bool = False) -> str:
    """The one JSON encoding of tscope's output files (see the module docstring)."""
    from tscope.model.case import json_safe  # here: `tscope --help` imports no pandas

    text = json.dumps(
        json_safe(payload) if round_floats else payload,
        sort_keys=True,
        ensure_ascii=False,
        allow_nan=False,
        default=_jsonable,
        **({"separators": (",", ":")} if compact else {"indent": 2}),
    )
    return _invisible_escaped(_without_surrogates(text)) + "\n"


def _invisible_escaped(text: str) -> str:
    """JSON text with each character of visible_text.JSON_INVISIBLE as its JSON escape (a
    surrogate pair beyond U+FFFF): only strings hold non-ASCII, so the escape is inside one."""
    if text.isascii():
        return text
    from tscope.model.visible_text import JSON_INVISIBLE

    def escaped(match: re.Match[str]) -> str:
        code = ord(match.group())
        if code <= 0xFFFF:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"

    return JSON_INVISIBLE.sub(escaped, text)


def _without_surrogates(text: str) -> str:
    """JSON text with each lone surrogate (a non-UTF-8 file name's byte, surrogateescape'd, or a
    `"\\ud800"` read from a stranger's JSON) as its visible escape, `\\xff`, inside the string it
    sits in: UTF-8 cannot encode one, and ensure_ascii=False leaves them raw. The text is JSON,
    so the escape's backslash is written escaped."""
    if text.isascii():
        return text
    from tscope.model.visible_text import SURROGATES, escape_character

    return SURROGATES.sub(lambda match: escape_character(match.group()).replace("\\", "\\\\"), text)


def write_texts(folder: Path, texts: Iterable[tuple[str, str]]) -> list[Path]:
    """Text files (name, text) into `folder`, in order: the rendered reports (case.*, cluster.*
    and their SVG charts, tscope.render.report_files.report_texts)."""
    return [write_text(folder / name, text) for name, text in texts]


def write_json(
    path: Path, payload: Any, *, round_floats: bool = True, compact: bool = False
) -> Path:
    return write_text(path, json_text(payload, round_floats=round_floats, compact=compact))


def _jsonable(value: Any) -> Any:
    """Values json_safe lets through: numpy scalars (bool_, 0-d arrays) and paths."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item"):
        from tscope.model.case import json_safe

        return json_safe(value.item())
    raise TypeError(f"case payload holds a {type(value).__name__}, which JSON cannot represent")


def prepare_case_folder(target: Path, clear: bool = True) -> Path:
    """The case folder, refused when it is a link or holds files tscope did not write; the files
    of an earlier case removed (`clear`)."""
    return prepare_folder(target, WHAT_A_CASE_IS, CASE_FOLDER_FILES, clear=clear)


def write_case(case: Case, target: Path, formats: tuple[str, ...]) -> list[Path]:
    """The case files, plus layers.parquet when checkpoints were read, into a folder that then
    holds only this case."""
    from tscope.render import render_case

    prepare_case_folder(target)
    written = render_case(case, target, formats)
    if case.layers_table is not None:
        written.append(write_layers_parquet(case.layers_table, target / LAYERS_PARQUET))
    return written


def write_parquet(path: Path, frame: pd.DataFrame) -> Path:
    """A table as parquet, without pandas' index."""
    return write_with(path, partial(frame.to_parquet, index=False))


def write_layers_parquet(frame: pd.DataFrame, path: Path) -> Path:
    """The layers table with its fixed schema (tscope.ingest.checkpoints.stats.layers documents it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tscope.ingest.checkpoints.stats.layers import arrow_values, layers_schema
    from tscope.model.checkpoint import LAYER_COLUMNS

    missing = [c for c in LAYER_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"layers table lacks columns {missing}")
    schema = layers_schema()
    arrays = [pa.array(arrow_values(frame[c], c), type=schema.field(c).type) for c in LAYER_COLUMNS]
    table = pa.Table.from_arrays(arrays, schema=schema)
    return write_with(Path(path), lambda handle: pq.write_table(table, handle))


def write_replay_files(investigation: Investigation, out_dir: Path) -> list[Path]:
    """replay.json, the per-step tables and skip_batches.json (never into the run directory)."""
    import pandas as pd

    from tscope.replay.skip_list import write_skip_batches

    prepare_folder(out_dir, "the replay")
    result = investigation.result
    payload = result.to_dict()
    if investigation.resume_checks:
        payload["resume_checks"] = [check.to_dict() for check in investigation.resume_checks]
    # Full precision: the fidelity numbers compare the replay's losses with the log's digits.
    written = [write_json(out_dir / REPLAY_JSON, payload, round_floats=False)]
    steps = pd.DataFrame(
        [
            {
                "step": s.step,
                "loss": s.loss,
                "grad_norm": s.grad_norm,
                "learning_rate": s.learning_rate,
                "samples": s.samples,
                "update_skipped": s.update_skipped,
                "seconds": s.seconds,
            }
            for s in result.per_step
        ]
    )
    written.append(write_parquet(out_dir / STEPS_TABLE, steps))
    layers = pd.DataFrame(
        [
            {"step": s.step, "layer": layer, "statistic": name, "value": value}
            for s in result.per_step
            for layer, values in s.layers.items()
            for name, value in values.items()
            if isinstance(value, (int, float))
        ],
        columns=["step", "layer", "statistic", "value"],
    )
    written.append(write_parquet(out_dir / LAYERS_TABLE, layers))
    samples = pd.DataFrame(
        [
            {"step": s.step, "index": index, "loss": loss}
            for s in result.per_step
            for index, loss in enumerate(s.per_sample_loss)
        ],
        columns=["step", "index", "loss"],
    )
    written.append(write_parquet(out_dir / SAMPLES_TABLE, samples))
    if investigation.skips is not None and investigation.skips.batches:
        # Lightning's SpikeDetection format (a resumed run reads it), not tscope's JSON encoding.
        written.append(write_skip_batches(out_dir, investigation.skips, investigation.run_dir))
    return written


def write_xray_file(audit: XrayAudit, out_dir: Path) -> Path:
    """xray.json: the audit and its findings."""
    from tscope.model.case import finding_dict

    prepare_folder(out_dir, WHAT_A_CASE_IS)  # created when missing; refused when it is a link
    payload = audit.result.to_dict()
    payload["findings"] = [finding_dict(f) for f in audit.findings]
    return write_json(out_dir / XRAY_JSON, payload)
