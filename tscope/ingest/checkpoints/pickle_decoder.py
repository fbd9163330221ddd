"""Decode a pickle without importing or calling anything (pickle_literals.py makes plain data of it).

`training_args.bin` is a pickled TrainingArguments: reading it with pickle or torch.load would
import transformers and run whatever the file names. Here the opcodes are walked by
`pickletools.genops` (a decoder, not an unpickler) and only literals are rebuilt: dicts, lists,
tuples, strings, numbers, booleans and None. Every object the pickle would construct stays an
inert record of the global's *name* and its arguments; nothing is ever looked up or called.
"""

from __future__ import annotations

import itertools
import pickletools
import reprlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_OPCODES = 2_000_000
# CPython hashes a tuple by recursing into its items in C with no recursion guard: a dict key of
# 1,000,000 nested 1-tuples (2 MB of TUPLE1 opcodes) overflows the C stack (SIGSEGV), in this
# decoder and in torch's weights_only unpickler alike. Real pickles nest tuples a few levels.
MAX_TUPLE_NESTING = 100
# An int past 2**1023 has no float, and past ~14,000 bits no str() (the 4,300-digit limit): a
# config value of that size ended `tscope analyze` in a traceback. Real pickled ints are
# counters, seeds and RNG words (numpy's SeedSequence entropy, the largest, is 128 bits).
MAX_INT_BITS = 1023


# identity hash: a record can be a dict key (DCP's MetadataIndex). Slots: 64 bytes a record
# instead of ~290 with a __dict__ and an empty items dict (a DCP chunk is ~6 records).
@dataclass(eq=False, slots=True)
class PickledObject:
    """What the pickle would have built: the global's name, its arguments, its state."""

    global_name: str
    args: tuple[Any, ...] = ()
    state: Any = None
    items: dict[Any, Any] | None = None  # SETITEMS on a dict subclass


class UndecodablePickle(ValueError):
    """The bytes are not a pickle this decoder follows (truncated, corrupted, too large)."""


class NestedTooDeep(UndecodablePickle):
    """Tuples nested deeper than MAX_TUPLE_NESTING: hashing one would crash the process."""


class DecodeBudgetExceeded(UndecodablePickle):
    """Decoding would hold more memory than the caller's budget (max_decoded_bytes)."""

    def __init__(self, budget: int) -> None:
        super().__init__(f"decoding it would hold more than {budget // 1_000_000 or 1} MB")
        self.budget = budget


class ForeignGlobal(UndecodablePickle):
    """A global (or a call of something that is no global) the caller does not admit."""

    def __init__(self, name: str) -> None:
        super().__init__(f"global {name} is not admitted")
        self.name = name


# What decoding holds, in bytes, charged as each opcode runs (CPython 3.11, 64-bit): the object
# an opcode builds (sys.getsizeof, which counts the GC header), a reference to it on the stack,
# and the growth of the list, dict or memo it lands in (sys.getsizeof before and after, O(1)).
# Nothing freed is credited back, so the charge bounds the peak from above.
_REFERENCE = 8
_RECORD_BYTES = sys.getsizeof(PickledObject(""))
_INT_KEY = sys.getsizeof(1 << 40)  # a memo index or a tuple id (ids are large ints)
_MARK_BYTES = _REFERENCE + _INT_KEY
_SMALL_INT_LOW, _SMALL_INT_HIGH = -5, 256  # CPython's shared small ints: no allocation
# A dict key that is no hashable value (a list: only a crafted pickle has one) is kept as a
# short text: its full repr could repeat one memoized 64 kB string 100,000 times (6.4 GB from a
# 265 kB file). Tuple keys of pickle_literals' plain form are shortened the same way.


class _KeyRepr(reprlib.Repr):
    """reprlib, which shortens strings, lists and tuples before it joins them, also for the
    values it would repr whole (bytes, records) and without sorting a whole dict first."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 40, 40

    def repr_bytes(self, value: bytes, level: int) -> str:
        return reprlib.Repr.repr_str(self, value[: self.maxstring].decode("latin-1"), level)

    def repr_PickledObject(
        self, value: PickledObject, level: int
    ) -> str:  # reprlib dispatches on the type name
        return f"{value.global_name[: self.maxother]}(...)"

    def repr_dict(self, value: dict[Any, Any], level: int) -> str:
        if level <= 0:
            return "{...}"
        shown = [
            f"{self.repr1(key, level - 1)}: {self.repr1(item, level - 1)}"
            for key, item in itertools.islice(value.items(), self.maxdict)
        ]
        return "{" + ", ".join(shown) + (", ...}" if len(value) > self.maxdict else "}")


_KEY_REPR = _KeyRepr()


_LITERAL_OPS = {
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "BYTEARRAY8",
}  # fmt: skip
_CONSTANTS = {"NEWTRUE": True, "NEWFALSE": False, "NONE": None}


def decode_pickle(
    payload: bytes,
    max_opcodes: int = MAX_OPCODES,
    max_decoded_bytes: int | None = None,
    admits_global: Callable[[str], bool] | None = None,
    persistent_ids: list[Any] | None = None,
    on_call: Callable[[PickledObject], None] | None = None,
) -> Any:
    """The pickle's top value with every object left as an inert PickledObject record.

    Nothing is imported or called: GLOBAL only records a name, REDUCE/NEWOBJ record the
    arguments, BUILD stores the state on the record. Containers are real dicts, lists and
    tuples. Marks are kept on their own stack (as pickle's own `metastack`), so each opcode costs
    O(1) however deep the stream nests. Raises UndecodablePickle for anything it cannot follow,
    DecodeBudgetExceeded when what it holds would pass `max_decoded_bytes` (see `_REFERENCE`),
    ForeignGlobal for a global `admits_global` refuses (and for a call of anything but a global,
    named "?", or a persistent id, named "persistent_id"), checked as each one is decoded.
    `persistent_ids`, when given, receives each persistent id as decoded (in torch files, the
    `('storage', type, key, location, numel)` tuple naming a tensor's bytes). `on_call`, when
    given, sees each REDUCE/NEWOBJ record with its arguments as decoded, and may raise.
    """
    stack: list[Any] = []
    marks: list[int] = []  # stack heights at each MARK
    # The memo: pickle numbers its entries 0, 1, 2, ... (MEMOIZE always, PUT in practice), so
    # they are a list (8 bytes an entry; a dict with int keys took ~75); other indexes a dict.
    memo: list[Any] = []
    memo_sparse: dict[int, Any] = {}
    # Nesting of each tuple built, by id: tuples are immutable, so the depth set when one is
    # built stays true (a tuple freed and its id reused is recorded again when rebuilt).
    tuple_depths: dict[int, int] = {}
    budget = sys.maxsize if max_decoded_bytes is None else max_decoded_bytes
    spent = 0  # bytes charged so far (see _REFERENCE)

    def record(global_name: str) -> PickledObject:
        if admits_global is not None and not admits_global(global_name):
            raise ForeignGlobal(global_name)
        return PickledObject(global_name)

    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(payload)):
            if count > max_opcodes:
                raise UndecodablePickle(f"more than {max_opcodes} opcodes")
            if spent > budget:
                raise DecodeBudgetExceeded(budget)
            name = op.name
            if name in _LITERAL_OPS:
                if isinstance(arg, int) and abs(arg).bit_length() > MAX_INT_BITS:
                    raise UndecodablePickle(f"an integer of more than {MAX_INT_BITS} bits")
                # genops decodes arguments; these three carry none: their value is the opcode
                if name in _CONSTANTS:
                    stack.append(_CONSTANTS[name])
                    spent += _REFERENCE
                else:
                    stack.append(arg)
                    shared = isinstance(arg, int) and _SMALL_INT_LOW <= arg <= _SMALL_INT_HIGH
                    spent += _REFERENCE + (0 if shared else sys.getsizeof(arg))
            elif name in ("PROTO", "FRAME"):
                continue
            elif name == "STOP":
                return _top(stack)
            elif name == "MARK":
                marks.append(len(stack))
                spent += _MARK_BYTES
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append({} if name == "EMPTY_DICT" else () if name == "EMPTY_TUPLE" else [])
                spent += _REFERENCE + (0 if name == "EMPTY_TUPLE" else sys.getsizeof(stack[-1]))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3", "TUPLE", "FROZENSET"):
                if name.startswith("TUPLE") and name != "TUPLE":
                    items = _pop(stack, marks, int(name[-1]))
                else:
                    items = _pop_to_mark(stack, marks)
                depths_before = sys.getsizeof(tuple_depths)
                stack.append(_tuple(items, tuple_depths))
                spent += _REFERENCE + sys.getsizeof(stack[-1]) + _INT_KEY  # the int: its id
                spent += sys.getsizeof(tuple_depths) - depths_before
            elif name in ("LIST", "DICT"):
                items = _pop_to_mark(stack, marks)
                built: dict[Any, Any] | list[Any]
                if name == "DICT":
                    built, built_bytes = _pairs(items)
                else:
                    built = list(items)
                    built_bytes = sys.getsizeof(built)
                stack.append(built)
                spent += _REFERENCE + built_bytes
            elif name in ("APPEND", "APPENDS", "ADDITEMS"):
                items = _pop(stack, marks, 1) if name == "APPEND" else _pop_to_mark(stack, marks)
                target = _top(stack)
                before = sys.getsizeof(target)
                _extend(target, items)
                spent += sys.getsizeof(target) - before
            elif name in ("SETITEM", "SETITEMS"):
                items = _pop(stack, marks, 2) if name == "SETITEM" else _pop_to_mark(stack, marks)
                spent += _set_items(_top(stack), items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                index = len(memo) + len(memo_sparse) if name == "MEMOIZE" else int(arg or 0)
                before = sys.getsizeof(memo) + sys.getsizeof(memo_sparse)
                if index == len(memo):
                    memo.append(_top(stack))
                elif 0 <= index < len(memo):
                    memo[index] = _top(stack)
                else:
                    memo_sparse[index] = _top(stack)
                    spent += _INT_KEY
                spent += sys.getsizeof(memo) + sys.getsizeof(memo_sparse) - before
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                index = int(arg or 0)
                if not 0 <= index < len(memo) and index not in memo_sparse:
                    # the KeyError's text alone was "5": name what the stream got wrong
                    raise UndecodablePickle(f"a memo reference to entry {index}, never stored")
                stack.append(memo[index] if 0 <= index < len(memo) else memo_sparse[index])
                spent += _REFERENCE
            elif name in ("GLOBAL", "STACK_GLOBAL"):  # a name, recorded, never imported
                if name == "GLOBAL":  # arg is "module name"
                    global_name = str(arg).replace(" ", ".")
                else:
                    module, attribute = _pop(stack, marks, 2)
                    if not isinstance(module, str) or not isinstance(attribute, str):
                        raise UndecodablePickle("STACK_GLOBAL of values that are not names")
                    global_name = f"{module}.{attribute}"
                stack.append(record(global_name))
                spent += _REFERENCE + _RECORD_BYTES + sys.getsizeof(global_name)
            elif name in ("REDUCE", "NEWOBJ", "NEWOBJ_EX"):
                popped = _pop(stack, marks, 3 if name == "NEWOBJ_EX" else 2)
                callable_, args = popped[0], popped[1]
                built_record = record(
                    callable_.global_name if isinstance(callable_, PickledObject) else "?"
                )
                built_record.args = args if isinstance(args, tuple) else (args,)
                if on_call is not None:
                    on_call(built_record)
                stack.append(built_record)
                spent += _REFERENCE + _RECORD_BYTES + (0 if args is built_record.args else 48)
            elif name == "BUILD":
                (state,) = _pop(stack, marks, 1)
                target = _top(stack)
                if isinstance(target, PickledObject):
                    target.state = state
            elif name in ("BINPERSID", "PERSID"):  # a tensor storage reference in torch files
                (persistent_id,) = _pop(stack, marks, 1) if name == "BINPERSID" else (arg,)
                if persistent_ids is not None:
                    persistent_ids.append(persistent_id)
                stack.append(record("persistent_id"))
                spent += _REFERENCE + _RECORD_BYTES
            elif name == "DUP":
                stack.append(_top(stack))
                spent += _REFERENCE
            elif name == "POP":
                if marks and marks[-1] == len(stack):  # POP of an empty mark drops the mark
                    marks.pop()
                else:
                    _pop(stack, marks, 1)
            elif name == "POP_MARK":
                _pop_to_mark(stack, marks)
            else:  # INST, OBJ, EXT*: old or rare forms; give up rather than guess
                raise UndecodablePickle(f"unsupported opcode {name}")
    except UndecodablePickle:
        raise
    except MemoryError:
        # One byte can build a 64-byte dict: a 40 MB DCP .metadata of EMPTY_DICT opcodes needs
        # 3 GB, and under a memory limit the MemoryError ended analyze with no readable error.
        # What was built is dropped first, so that the error itself can be made.
        stack.clear()
        memo.clear()
        memo_sparse.clear()
        tuple_depths.clear()
        raise UndecodablePickle("it describes more objects than fit in memory") from None
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as error:
        raise UndecodablePickle(str(error).splitlines()[0][:200] if str(error) else "") from error
    raise UndecodablePickle("the stream has no STOP opcode")


def _tuple(items: list[Any], tuple_depths: dict[int, int]) -> tuple[Any, ...]:
    """The tuple of `items`, refused when it would nest tuples deeper than MAX_TUPLE_NESTING."""
    depth = 1 + max(
        (tuple_depths.get(id(item), 1) for item in items if isinstance(item, tuple)), default=0
    )
    if depth > MAX_TUPLE_NESTING:
        raise NestedTooDeep(f"tuples nested more than {MAX_TUPLE_NESTING} deep")
    built = tuple(items)
    if depth > 1:
        tuple_depths[id(built)] = depth
    else:  # depth 1 is the default: only nested tuples are recorded (a DCP chunk has a few)
        tuple_depths.pop(id(built), None)  # the id of a freed nested tuple, reused
    return built


def _pop(stack: list[Any], marks: list[int], count: int) -> list[Any]:
    """The top `count` values, which must all lie above the innermost mark."""
    floor = marks[-1] if marks else 0
    if len(stack) - floor < count:
        raise UndecodablePickle("an opcode pops more values than the stack holds")
    items = stack[len(stack) - count :]
    del stack[len(stack) - count :]
    return items


def _top(stack: list[Any]) -> Any:
    if not stack:
        raise UndecodablePickle("an opcode needs a value on an empty stack")
    return stack[-1]


def _pop_to_mark(stack: list[Any], marks: list[int]) -> list[Any]:
    if not marks:
        raise UndecodablePickle("no MARK to pop to")
    index = marks.pop()
    items = stack[index:]
    del stack[index:]
    return items


def _pairs(items: list[Any]) -> tuple[dict[Any, Any], int]:
    """The dict of key, value `items` and the bytes it holds (with its key texts, _set_items)."""
    out: dict[Any, Any] = {}
    return out, sys.getsizeof(out) + _set_items(out, items)


def _set_items(target: Any, items: list[Any]) -> int:
    """Store key, value `items` into a dict (or a record's items); the bytes this added: the
    dict's growth (a record's new items dict whole) and the texts of unhashable keys."""
    before = 0  # a record's new items dict is charged whole
    if isinstance(target, PickledObject):
        if target.items is None:
            target.items = {}
        else:
            before = sys.getsizeof(target.items)
        store = target.items
    elif isinstance(target, dict):
        before = sys.getsizeof(target)
        store = target
    else:
        return 0
    key_bytes = 0
    for key, value in zip(items[::2], items[1::2], strict=True):
        try:
            store[key] = value
        except TypeError:  # an unhashable key (a list or dict): keep a short text of it
            text = key_text(key)
            key_bytes += sys.getsizeof(text)
            store[text] = value
    return sys.getsizeof(store) - before + key_bytes


def key_text(key: Any) -> str:
    """A dict key that is not a string, as a short text (a few hundred characters at most, from
    a few dozen of its values): never a copy per reference of a shared value."""
    return _KEY_REPR.repr(key)


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
