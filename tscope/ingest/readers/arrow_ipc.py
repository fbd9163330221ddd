"""Arrow IPC files from strangers (a trainscope recording's `global.arrow`, `layers/*.arrow`, …).

pyarrow reads what an IPC message declares, so a few bytes can stand for gigabytes:

* a compressed body (LZ4/ZSTD) declares each buffer's uncompressed size: 24 KB of zstd became
  800 MB of zeros, and the analysis ran out of memory. Each message's declared sizes are read
  from its metadata (`_expanded_body_bytes`) before pyarrow decompresses anything, and a file
  that would expand past its budget is refused;
* run-end-encoded arrays, list/string views and dictionaries of lists let one stored value stand
  for any number of rows: a 768-byte global.arrow of one run-end-encoded run of 2**28 steps, or a
  list view repeating one 100,000-value list 2,000 times, made the process get killed for memory
  once pandas expanded them. Only plain columns are read (`_plain_type`);
* pandas metadata in the schema drives `to_pandas` (index columns, dtypes): a crafted one ended
  the analysis in a KeyError, a JSONDecodeError or an OverflowError. It is dropped: tscope reads
  columns by name and needs none of it;
* a column name written twice made `Table.select` raise a KeyError; such a file is refused.

An IPC file is read through its stream part (the messages after the 8-byte magic, which the file
writer writes in stream format before its footer), so the messages checked are the ones read: a
footer could otherwise point at other, unchecked messages.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.ingest.safe_fs import read_bytes_bounded

if TYPE_CHECKING:
    import pandas as pd

ARROW_FILE_MAGIC = b"ARROW1"
ARROW_FILE_HEADER = 8  # "ARROW1" and two bytes of padding, then the stream-format messages
ARROW_STREAM_CONTINUATION = b"\xff\xff\xff\xff"
# Decompressed bytes allowed per byte of the file (and a floor for tiny files). Training metrics
# compress a few times at most; a bomb is thousands of times its size.
MAX_EXPANSION = 64
MIN_EXPANDED_BYTES = 1024 * 1024
# The Message union's members that carry a body (format/Message.fbs).
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3


class _Damaged(ValueError):
    """A message's metadata points outside itself or declares a negative size."""


def read_arrow(
    path: Path, display_path: str, limit: int, wanted: set[str]
) -> tuple[pd.DataFrame | None, str]:
    """The `wanted` columns of an Arrow IPC file or stream as a DataFrame, and what was wrong
    with it ("" when nothing). A stream cut inside its last message keeps the batches before it."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    data = read_bytes_bounded(path, display_path, limit)
    if not data:
        return None, "empty file"
    stream = data[ARROW_FILE_HEADER:] if data.startswith(ARROW_FILE_MAGIC) else data
    budget = min(limit, max(MAX_EXPANSION * len(data), MIN_EXPANDED_BYTES))
    try:
        expanded = _expanded_stream_bytes(stream, budget)
    except (pa.ArrowInvalid, OSError, _Damaged, struct.error, IndexError) as error:
        return None, f"not a readable Arrow file ({error})"
    if expanded > budget:
        return None, (
            f"its compressed Arrow buffers declare more than {budget} bytes once expanded, "
            f"from a {len(data)}-byte file (a decompression bomb, or a damaged file)"
        )
    batches: list[Any] = []
    problem = ""
    try:
        reader = ipc.open_stream(pa.BufferReader(stream))
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError) as error:
                problem = f"the last Arrow message is cut or damaged ({error}); earlier rows kept"
                break
    except (pa.ArrowInvalid, OSError) as error:
        return None, f"not a readable Arrow file ({error})"
    if not batches:
        return None, problem or "no rows"
    try:
        table = pa.Table.from_batches(batches)
        table.validate(full=True)
    except (pa.ArrowInvalid, OSError) as error:
        return None, f"damaged Arrow data ({error})"
    names = [name for name in table.column_names if name in wanted]
    for name in sorted(set(names)):
        if names.count(name) > 1:
            return None, f"column {name!r} appears {names.count(name)} times"
        column_type = table.schema.field(name).type
        if not _plain_type(column_type):
            return None, (
                f"column {name!r} is Arrow type {column_type}, which a recorder does not write "
                "(only plain numbers, text and lists of numbers are read)"
            )
    plain = table.select(names).replace_schema_metadata(None)  # no pandas metadata: see above
    return plain.to_pandas(), problem


def _plain_type(arrow_type: Any, nested: bool = False) -> bool:
    """Numbers, booleans, text, times, dictionaries of those, and (one level) lists of numbers:
    types whose stored buffers hold every row, so pandas makes no more of them than the file
    holds. Null columns are left out too: they store nothing per row."""
    import pyarrow.types as types

    if (
        types.is_integer(arrow_type)
        or types.is_floating(arrow_type)
        or types.is_boolean(arrow_type)
        or types.is_decimal(arrow_type)
        or types.is_temporal(arrow_type)
    ):
        return True
    if nested:
        return False
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return True
    if types.is_dictionary(arrow_type):
        value_type = arrow_type.value_type
        return types.is_string(value_type) or _plain_type(value_type, nested=True)
    if types.is_list(arrow_type) or types.is_large_list(arrow_type):
        return _plain_type(arrow_type.value_type, nested=True)
    return False


def _expanded_stream_bytes(stream: bytes, budget: int) -> int:
    """The bytes the stream's message bodies take once decompressed, read from the metadata of
    each message (stopping past `budget` or at a cut tail, which the batch reader reports)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    messages = ipc.MessageReader.open_stream(pa.BufferReader(stream))
    total = 0
    while total <= budget:
        try:
            message = messages.read_next_message()
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError):
            break  # a cut or damaged tail: read_arrow keeps the batches before it
        body = message.body
        total += _expanded_body_bytes(
            memoryview(message.metadata), memoryview(body) if body is not None else memoryview(b"")
        )
    return total


def _expanded_body_bytes(metadata: memoryview, body: memoryview) -> int:
    """What one message's body takes once its buffers are decompressed (format/Message.fbs: a
    RecordBatch, alone or inside a DictionaryBatch, lists its buffers and, when compressed, each
    buffer starts with its uncompressed length as an int64, -1 for a buffer left uncompressed)."""
    root = _table(metadata, _offset_field(metadata, 0))
    kind_at = _field(metadata, root, 1)
    kind = int(metadata[kind_at]) if kind_at is not None else 0
    header_at = _field(metadata, root, 2)
    if header_at is None or kind not in (_DICTIONARY_BATCH, _RECORD_BATCH):
        return len(body)
    batch = _table(metadata, _offset_field(metadata, header_at))
    if kind == _DICTIONARY_BATCH:
        data_at = _field(metadata, batch, 1)
        if data_at is None:
            return len(body)
        batch = _table(metadata, _offset_field(metadata, data_at))
    buffers_at = _field(metadata, batch, 2)
    if _field(metadata, batch, 3) is None or buffers_at is None:
        return len(body)  # not compressed: the body is what the batch holds
    vector = _offset_field(metadata, buffers_at)
    (count,) = struct.unpack_from("<I", metadata, vector)
    total = 0
    for index in range(count):
        offset, length = struct.unpack_from("<qq", metadata, vector + 4 + 16 * index)
        if offset < 0 or length < 0:
            raise _Damaged("a buffer with a negative offset or length")
        if length < 8:
            total += length
            continue
        (uncompressed,) = struct.unpack_from("<q", body, offset)
        if uncompressed < -1:
            raise _Damaged("a buffer with a negative uncompressed length")
        total += length - 8 if uncompressed == -1 else uncompressed
    return total


def _offset_field(buffer: memoryview, at: int) -> int:
    """The position a flatbuffer offset (uoffset_t, relative to where it is stored) points at."""
    relative: int = struct.unpack_from("<I", buffer, at)[0]
    return at + relative


def _table(buffer: memoryview, at: int) -> tuple[int, int, int]:
    """A flatbuffer table at `at`: its position, its vtable's position and the vtable's size."""
    back: int = struct.unpack_from("<i", buffer, at)[0]
    vtable = at - back
    if vtable < 0:
        raise _Damaged("a table whose field list lies before the message")
    size: int = struct.unpack_from("<H", buffer, vtable)[0]
    return at, vtable, size


def _field(buffer: memoryview, table: tuple[int, int, int], index: int) -> int | None:
    """Where the table's field `index` is stored, or None when the table does not set it."""
    at, vtable, size = table
    slot = 4 + 2 * index
    if slot + 2 > size:
        return None
    relative: int = struct.unpack_from("<H", buffer, vtable + slot)[0]
    return at + relative if relative else None
