"""Whether a JSON Lines file may go to pyarrow's reader, judged from its bytes at C speed.

pyarrow builds one dense column per distinct key, as long as the file has lines: a 3 MB file
with a new key on every line (100,000 keys × 100,000 lines) asked it for tens of GB. So pyarrow
only gets files whose dense table is not much larger than the cells the file actually holds;
sparse or very wide files go through the stdlib path, which stores only the logged cells
(table_cells.RecordColumns) and caps what it densifies.
"""

from __future__ import annotations

import re

# A key: a JSON string followed by a colon. Strings hold no raw line breaks. Misaligned matches
# (starting at a value's closing quote) can only add keys, which errs toward the safe path.
_KEY = re.compile(rb'"([^"\\\r\n]*(?:\\.[^"\\\r\n]*)*)"\s*:')
# pyarrow is used when the dense table (distinct keys × lines) is at most this many times the
# key occurrences in the file: train rows and eval rows with their own keys stay well within it.
MAX_DENSE_PER_CELL = 8
# Below this many dense cells the shape does not matter.
SMALL_TABLE_CELLS = 1_000_000
_CHUNK_BYTES = 8 * 1024 * 1024


def arrow_table_is_bounded(data: bytes) -> bool:
    """Whether pyarrow's dense table for these JSON Lines stays proportional to the file."""
    lines = data.count(b"\n") + 1
    occurrences = data.count(b'":')  # an upper bound of the key occurrences
    budget = max(SMALL_TABLE_CELLS, MAX_DENSE_PER_CELL * occurrences)
    most_keys = budget // lines
    keys: set[bytes] = set()
    start = 0
    while start < len(data):
        # Chunks end at a line break, so no key is cut in two.
        end = data.find(b"\n", start + _CHUNK_BYTES)
        end = len(data) if end < 0 else end + 1
        keys.update(_KEY.findall(data, start, end))
        if len(keys) > most_keys:
            return False
        start = end
    return True
