"""What every stdout text-log reader shares: which files to sniff, streaming lines, number parsing.

The producer-specific readers (Megatron, nanoGPT, modded-nanogpt, the HF Trainer's printed dicts)
live in their own modules and use these helpers; this module knows no producer's line format.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.safe_fs import open_regular

# Names a captured stdout/stderr gets: `python train.py > train.log`, slurm's `%j.out`/`%j.err`,
# nohup/W&B's `output.log`, records saved as `.txt`, and files called `stdout`/`stdout.rank0`.
TEXT_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
TEXT_LOG_NAME_PREFIX = "stdout"
# Tables are the metrics-table reader's job, even when their name starts with "stdout".
_TABLE_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")
# How much of a file `can_read` looks at. modded-nanogpt logs open with the training script's source
# (20-140 KB), so the tail is sniffed too: the step lines sit at the end.
SNIFF_BYTES = 64 * 1024
# A text log never contains NUL bytes in its first block; binary files almost always do.
_BINARY_MARKER = b"\x00"
# Longest physical line read at once. tqdm writes progress with "\r" and no "\n", so a captured
# stderr can be one huge line; cutting it into pieces keeps memory bounded and loses at most the
# record that straddles a cut.
MAX_LINE_BYTES = 1024 * 1024
# Launchers prefix every line of a rank's output: torchrun --tee "[default7]:" or "[rank0]:",
# srun --label "0: ". Terminal-wrapped continuation lines carry no prefix.
_LAUNCHER_PREFIX = re.compile(
    r"^\s*(?:\[(?:default|rank)(?P<bracketed>\d{1,6})\]:|(?P<label>\d{1,5}): )"
)
# Colour and cursor-movement escapes (tqdm moves the cursor up with ESC[A between nested bars), and
# the character-set selections `tput sgr0` ends with (ESC(B).
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")
_CONFIG_INT = re.compile(r"[-+]?\d+")
# Most digits an integer read from a log may have: every 18-digit integer fits in int64, and no
# step, count or size gets near 10**18. int() of a longer run is not only meaningless but raises
# ValueError past 4,300 digits (Python's int_max_str_digits), so `iter <5000 digits>:` was a
# traceback; a longer number is not a step (the line is skipped) nor a count (kept as text).
MAX_INT_DIGITS = 18


def is_text_log_name(path: Path) -> bool:
    """True for the file names stdout captures get; never for tables (CSV/TSV/JSON)."""
    name = path.name.lower()
    if name.endswith(_TABLE_SUFFIXES):
        return False
    return name.endswith(TEXT_LOG_SUFFIXES) or name.startswith(TEXT_LOG_NAME_PREFIX)


def sniff_text(path: Path) -> str:
    """The first and last SNIFF_BYTES of a file as text; "" for binary files or on any OS error."""
    try:
        with open_regular(path, path.name) as handle:
            head = handle.read(SNIFF_BYTES)
            if _BINARY_MARKER in head.rstrip(_BINARY_MARKER):
                return ""
            handle.seek(0, 2)
            size = handle.tell()
            tail = b""
            if size > 2 * SNIFF_BYTES:
                handle.seek(size - SNIFF_BYTES)
                tail = handle.read(SNIFF_BYTES)
            elif size > SNIFF_BYTES:
                tail = handle.read()  # the rest, right after the head
    except (OSError, UnreadableInput):
        return ""
    return (head + b"\n" + tail).decode("utf-8", errors="replace")


def sniff_matches(path: Path, pattern: re.Pattern[str]) -> bool:
    """The cheap `can_read` test shared by the text readers: a log name and a producer's line."""
    if not is_text_log_name(path):
        return False
    text = sniff_text(path)
    return bool(text) and pattern.search(text) is not None


def iter_lines(path: Path, display_path: str) -> Iterator[str]:
    """Physical lines of a log as text, without their line ending, NUL padding removed.

    Lines are split on "\\n" only: "\\r" is kept so that readers can see tqdm's overwritten
    progress bars. Undecodable bytes become U+FFFD instead of failing the read.
    """
    try:
        with open_regular(path, display_path) as handle:
            # NULs inside the text mean a binary file; NULs only at the end are the zero-filled
            # tail a crashed node leaves in a log, and are dropped below.
            if _BINARY_MARKER in handle.read(SNIFF_BYTES).rstrip(_BINARY_MARKER):
                raise UnreadableInput(display_path, "binary data, not a text log")
            handle.seek(0)
            while True:
                raw = handle.readline(MAX_LINE_BYTES)
                if not raw:
                    return
                text = raw.decode("utf-8", errors="replace")
                yield text.rstrip("\n").rstrip("\r").replace("\x00", "")
    except OSError as error:
        raise UnreadableInput(display_path, f"the file could not be read ({error})") from error


def strip_launcher_prefix(line: str) -> str:
    """The line without a launcher's rank prefix ("[default7]:", "[rank0]:", "0: ")."""
    return split_launcher_prefix(line)[1]


def split_launcher_prefix(line: str) -> tuple[int | None, str]:
    """(the rank a launcher's prefix names, or None without one; the line without it)."""
    match = _LAUNCHER_PREFIX.match(line)
    if match is None:
        return None, line
    return int(match["bracketed"] or match["label"]), line[match.end() :]


def strip_ansi(text: str) -> str:
    return _ANSI_ESCAPE.sub("", text)


def parse_number(text: str) -> float | None:
    """A printed number as float, NaN/Inf spellings included; None if the text is not a number."""
    token = text.strip().rstrip(",;%")
    if not token or "_" in token:  # float() would accept "1_000"; no producer prints that
        return None
    try:
        return float(token)  # also takes "nan", "NAN", "-nan", "inf", "Infinity"
    except ValueError:
        return None


def parse_int(text: str) -> int | None:
    """A printed integer ("1,234" too), or None when not one or longer than MAX_INT_DIGITS digits.

    Every step, count and setting a reader takes from a text log goes through here, so that no
    stranger's digits reach int() unbounded.
    """
    token = text.strip().replace(",", "")
    if not _CONFIG_INT.fullmatch(token) or len(token.lstrip("+-")) > MAX_INT_DIGITS:
        return None
    return int(token)


def parse_config_value(text: str) -> int | float | bool | str | None:
    """A printed flag value as a scalar where it plainly is one, else the text itself.

    No eval: only ints, floats, True/False/None and one quoted string are recognised, so a
    stranger's log can never run code or build deep structures here.
    """
    value = text.strip()
    if value in ("True", "False"):
        return value == "True"
    if value == "None":
        return None
    if _CONFIG_INT.fullmatch(value):
        as_int = parse_int(value)
        # Past MAX_INT_DIGITS digits it is no setting's value: shown as printed, not as a number.
        return value if as_int is None else as_int
    number = parse_number(value)
    if number is not None:
        return number
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        if value[0] not in inner and "\\" not in inner:
            return inner
    return value


def no_records_error(display_path: str, producer: str) -> UnreadableInput:
    return UnreadableInput(
        display_path,
        f"no {producer} training log lines were found",
        "The file may be truncated before training started, or be another program's output",
    )
