"""JSON from strangers, parsed: a nesting limit and tame numbers (the size bound is the caller's).

Shared by the readers (through tscope.ingest.safe_json, which adds reading the file under a size
limit) and by render, which reads case.json back for `tscope report`.

Python's json module is safe from code execution but not from the shapes a hostile or broken
file can take, and each of these used to end in a traceback somewhere downstream:

  * nesting: `[[[[…]]]]` 100,000 deep raises RecursionError inside json; 900 deep parses, then
    breaks the next recursive walk (flattening a config, writing case.json, rendering). A cheap
    pre-scan of the bytes counts bracket depth before anything is parsed (`depth_over_limit`), so
    the same check also guards parsers that crash instead of raising (pyarrow's JSON reader
    segfaults on a 50,000-deep array);
  * numbers: `1e400` is inf, `NaN` and `Infinity` are accepted by Python's json, an integer of
    5,000 digits raises ValueError (int_max_str_digits) and one beyond 2**63 overflows numpy.
    Integers outside the int64 range are returned as floats (inf when beyond float range), so a
    caller sees one of: an int64-safe int, or a float that may be non-finite;
  * size: the caller reads at most the bytes a file of its kind can sensibly hold, and the
    parsed objects must fit MAX_PARSED_BYTES as estimated from the bytes (`parsed_size_estimate`):
    three bytes of `{},` become a 64-byte dict, so a 256 MiB file of them would take ~7 GB
    (red team, session 28: 80 MB of empty rows in trainer_state.json took 2.2 GB).

Everything that goes wrong raises RefusedJson (a ValueError with the problem and a hint).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

# Deepest nesting tscope accepts. Real files stay far below it (trainer_state.json: 3, a W&B or
# model config: under 10, case.json: under 10); far above it, recursive code downstream (json
# itself, flattening, rendering) would hit Python's recursion limit of 1,000.
MAX_JSON_DEPTH = 100
# Integers outside int64 cannot be steps or numpy values; they are kept as (possibly inf) floats.
_INT64_DIGITS = 18  # every integer of at most 18 digits fits in int64
_INT64_MAX = 2**63 - 1
# A JSON string, escapes included: stripped before brackets are counted, since "[" in a string is
# not nesting. The unrolled form ("normal* (escape normal*)*") matches in linear time. JSON
# strings hold no raw line breaks, so a match never spans lines: an unclosed quote on one line of
# a JSON Lines file cannot hide the brackets of the next line from the count.
_JSON_STRING = re.compile(rb'"[^"\\\r\n]*(?:\\[^\r\n][^"\\\r\n]*)*"')
_BRACKETS_ONLY = bytes(range(256)).translate(None, b"[]{}")  # every byte except brackets
# Bytes scanned per numpy pass of the depth pre-scan: bounds its scratch memory (~5× this).
_SCAN_CHUNK_BYTES = 8 * 1024 * 1024


# What the parsed objects of one document may take, as estimated below: a real trainer_state.json
# of a million logged steps (~150 MB, ~9 objects per 150-byte row) is estimated at ~0.65 GB.
MAX_PARSED_BYTES = 1024**3
# Bytes one parsed value costs, as estimated: a float (24) or an empty dict (64) and its slot in
# a list or dict (8 to ~40); json shares repeated keys.
_BYTES_PER_VALUE = 72


def parsed_size_estimate(data: bytes) -> int:
    """An upper estimate of the memory the parsed document takes: every value but the last of a
    container is followed by a comma, and containers open with a bracket (commas and brackets
    inside strings count too: the estimate errs high). Linear and C-speed."""
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    return values * _BYTES_PER_VALUE + 2 * len(data)


def depth_over_limit(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> int | None:
    """How deep JSON (or JSON Lines) bytes nest when that is more than `max_depth`, else None.

    Linear and C-speed. First an upper bound that counts every bracket (bytes.translate and a
    numpy running sum: ~0.1 s for 100 MB); only a file over the limit pays for the exact count,
    which leaves out brackets inside strings (a regex, ~40 MB/s). Errs high, never low.
    """
    bound = _bracket_depth(data)
    if bound <= max_depth:
        return None
    exact = _bracket_depth(_JSON_STRING.sub(b"", data))
    return exact if exact > max_depth else None


def _bracket_depth(data: bytes) -> int:
    """The deepest running count of opening minus closing brackets; strings are not skipped."""
    brackets = data.translate(None, _BRACKETS_ONLY)
    deepest = 0
    depth = 0
    for start in range(0, len(brackets), _SCAN_CHUNK_BYTES):
        chunk = np.frombuffer(brackets, np.uint8)[start : start + _SCAN_CHUNK_BYTES]
        # "[" 0x5B and "{" 0x7B open, "]" 0x5D and "}" 0x7D close.
        steps = np.where((chunk == 0x5B) | (chunk == 0x7B), 1, -1).astype(np.int64)
        running = np.cumsum(steps) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


def _parse_int(text: str) -> int | float:
    digits = len(text) - text.startswith("-")
    if digits <= _INT64_DIGITS:
        return int(text)
    if digits == _INT64_DIGITS + 1:  # 19 digits: fits in int64 or not, by value
        exact = int(text)
        if -_INT64_MAX - 1 <= exact <= _INT64_MAX:
            return exact
    # float() takes any length (inf beyond 1e308): no int_max_str_digits ValueError.
    return float(text)


class RefusedJson(ValueError):
    """The bytes are not JSON tscope uses; `problem` and `hint` complete "Cannot read FILE: ".

    The model imports nothing from tscope: tscope.ingest.safe_json and render turn it into
    UnreadableInput."""

    def __init__(self, problem: str, hint: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


class _HugeInteger(ValueError):
    pass


def _refuse_huge(text: str) -> int:
    number = _parse_int(text)
    if isinstance(number, float):
        raise _HugeInteger(text[:20])
    return number


def parse(
    data: bytes | str,
    max_depth: int = MAX_JSON_DEPTH,
    refuse_huge_ints: bool = False,
    max_parsed_bytes: int = MAX_PARSED_BYTES,
) -> Any:
    """Parse one JSON document under the nesting limit, numbers tamed (see module doc).

    `refuse_huge_ints`: for files tscope writes itself (case.json), where an integer beyond
    int64 is not a value to render but a sign that the file was not written by tscope.
    `max_parsed_bytes`: a tighter bound for a kind of file whose shape is known (a safetensors
    header), never above MAX_PARSED_BYTES.
    """
    limit = min(max_parsed_bytes, MAX_PARSED_BYTES)
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    depth = depth_over_limit(raw, max_depth)
    if depth is not None:
        raise RefusedJson(
            f"JSON nested {depth} levels deep, more than the {max_depth} tscope reads",
            "No training tool writes such a file; it is damaged or crafted",
        )
    estimate = parsed_size_estimate(raw)
    if estimate > limit:
        raise RefusedJson(
            f"would take ~{estimate / 1024**2:,.0f} MiB once parsed ({len(raw)} bytes of mostly "
            f"tiny values), more than the {limit / 1024**2:,.0f} MiB tscope allows this file",
            "No training tool writes such a file; it is damaged or crafted",
        )
    try:
        text = raw.decode("utf-8-sig") if isinstance(data, bytes) else data
        return json.loads(text, parse_int=_refuse_huge if refuse_huge_ints else _parse_int)
    except _HugeInteger as error:
        raise RefusedJson(
            f"holds the integer {error}…, beyond the 64-bit range tscope writes"
        ) from error
    except UnicodeDecodeError as error:
        raise RefusedJson(f"not UTF-8 text ({error.reason})") from error
    except json.JSONDecodeError as error:
        raise RefusedJson(
            f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})",
            "The file may be truncated (a run still writing, or a partial copy)",
        ) from error
    except (ValueError, RecursionError, MemoryError) as error:
        raise RefusedJson(f"not usable JSON ({type(error).__name__})") from error
