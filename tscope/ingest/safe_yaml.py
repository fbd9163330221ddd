"""YAML from strangers (W&B's `files/config.yaml`): no alias bombs, bounded depth, plain data.

`yaml.safe_load` runs no code, but it is not safe for size: aliases let a 600-byte file describe
a tree of 9**9 nodes ("billion laughs"). PyYAML itself shares the aliased objects, so the load is
cheap; the blow-up comes later, in whatever walks the tree (flattening the config, writing
case.json): 4.5 GB and 92 s for one crafted file. This loader

  * counts the size the document has once every alias is expanded (one per node plus the
    characters of each scalar, so an aliased long string counts as often as it is repeated), and
    refuses a document beyond a budget proportional to its size (a file without aliases fits);
  * refuses an alias to a node that is still being built (`&a [*a]`: a tree that contains itself,
    which no recursive walk survives), and nesting deeper than MAX_YAML_DEPTH (the composer
    recurses per level);
  * returns plain JSON-like data: aliases copied out into a tree, dict keys as text, and the
    types YAML adds (timestamps, binary, sets, pairs) turned into text or lists; integers beyond
    int64 become floats, as in safe_json.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import yaml

from tscope.errors import UnreadableInput

# Nesting accepted; W&B configs nest a few levels. Each level costs the composer a few frames.
MAX_YAML_DEPTH = 100
# Expanded size (nodes + scalar characters) allowed per byte of the file, plus a floor for tiny
# files. A document without aliases is at most ~2 per byte; a few aliases re-used a few times
# stay below 4; an alias bomb is millions of times its size.
SIZE_PER_BYTE = 4
MIN_SIZE_BUDGET = 10_000
_INT64 = 2**63


class _BudgetExceeded(yaml.YAMLError):
    """Raised inside the composer; turned into UnreadableInput by `load`."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer keeps count of the expanded size and depth of what it builds."""

    def __init__(self, text: str, size_budget: int) -> None:
        super().__init__(text)
        self.size_budget = size_budget
        self.size_counted = 0
        self.depth = 0
        # id(node) -> its expanded size; only nodes whose composition finished are listed.
        self.expanded_size: dict[int, int] = {}

    def _count(self, size: int) -> None:
        self.size_counted += size
        if self.size_counted > self.size_budget:
            raise _BudgetExceeded(
                f"its aliases expand it to more than {self.size_budget} nodes and characters "
                "(an alias bomb)"
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]
            target = self.anchors.get(anchor)
            if target is not None:
                size = self.expanded_size.get(id(target))
                if size is None:
                    raise _BudgetExceeded(f"alias *{anchor} refers to a node that contains it")
                self._count(size)
            return super().compose_node(parent, index)  # an unknown alias: PyYAML's own error
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            raise _BudgetExceeded(f"nested more than {MAX_YAML_DEPTH} levels deep")
        before = self.size_counted
        self._count(1)
        node = super().compose_node(parent, index)
        if isinstance(node, yaml.ScalarNode):
            self._count(len(node.value))
        self.depth -= 1
        self.expanded_size[id(node)] = self.size_counted - before
        return node


def load(text: str, display_path: str) -> Any:
    """The YAML document in `text` as plain data; UnreadableInput when it is unusable."""
    loader: _BoundedLoader | None = None
    try:
        # The constructor already reads: a control character raises here (ReaderError).
        loader = _BoundedLoader(text, max(MIN_SIZE_BUDGET, SIZE_PER_BYTE * len(text)))
        return _plain(loader.get_single_data())
    except _BudgetExceeded as error:
        raise UnreadableInput(
            display_path, f"YAML refused: {error}", "No tool writes such a file; it is crafted"
        ) from error
    except (yaml.YAMLError, ValueError, RecursionError) as error:
        # ValueError: an integer of more than 4,300 digits (Python's int_max_str_digits).
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UnreadableInput(display_path, f"not valid YAML ({problem})") from error
    finally:
        if loader is not None:
            loader.dispose()


def _plain(value: Any) -> Any:
    """A JSON-like copy: dict/list/str/int/float/bool/None only. Depth is bounded by the loader
    and the size by its budget, so the recursion and the copy are bounded too."""
    if isinstance(value, dict):
        return {_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(item) for item in value), key=repr)
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else _int_as_float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes of binary>"
    return str(value)


def _key(key: Any) -> str:
    plain = _plain(key)
    return plain if isinstance(plain, str) else str(plain)


def _int_as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        # By the sign's comparison: math.copysign(math.inf, value) converts `value` to float
        # again, and an integer of 400 digits (or 0x and 5,000 hex digits) overflowed there too.
        return math.inf if value > 0 else -math.inf
