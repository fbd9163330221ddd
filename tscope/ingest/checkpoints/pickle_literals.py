"""Recover plain data from a pickle without importing or calling anything.

`training_args.bin` is a pickled TrainingArguments: reading it with pickle or torch.load would
import transformers and run whatever the file names. Here the opcodes are walked by
`pickletools.genops` (a decoder, not an unpickler) and only literals are rebuilt: dicts, lists,
tuples, strings, numbers, booleans and None. Every object the pickle would construct stays an
inert record of the global's *name* and its arguments; nothing is ever looked up or called.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tscope.ingest.safe_fs import is_regular_file

MAX_PICKLE_BYTES = 16 * 1024 * 1024  # TrainingArguments pickles are ~5 kB
MAX_OPCODES = 2_000_000
MAX_PLAIN_NODES = 1_000_000  # values rebuilt from one pickle
MAX_DEPTH = 50
# CPython hashes a tuple by recursing into its items in C with no recursion guard: a dict key of
# 1,000,000 nested 1-tuples (2 MB of TUPLE1 opcodes) overflows the C stack (SIGSEGV), in this
# decoder and in torch's weights_only unpickler alike. Real pickles nest tuples a few levels.
MAX_TUPLE_NESTING = 100
# An int past 2**1023 has no float, and past ~14,000 bits no str() (the 4,300-digit limit): a
# config value of that size ended `tscope analyze` in a traceback. Real pickled ints are
# counters, seeds and RNG words (numpy's SeedSequence entropy, the largest, is 128 bits).
MAX_INT_BITS = 1023


@dataclass(eq=False)  # identity hash: a record can be a dict key (DCP's MetadataIndex)
class PickledObject:
    """What the pickle would have built: the global's name, its arguments, its state."""

    global_name: str
    args: tuple[Any, ...] = ()
    state: Any = None
    items: dict[Any, Any] = field(default_factory=dict)  # SETITEMS on a dict subclass


class UndecodablePickle(ValueError):
    """The bytes are not a pickle this decoder follows (truncated, corrupted, too large)."""


class NestedTooDeep(UndecodablePickle):
    """Tuples nested deeper than MAX_TUPLE_NESTING: hashing one would crash the process."""


_LITERAL_OPS = {
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "BYTEARRAY8",
}  # fmt: skip
_CONSTANTS = {"NEWTRUE": True, "NEWFALSE": False, "NONE": None}


def pickle_literals(payload: bytes) -> Any:
    """The pickle's top value as plain data; objects become their state dict (or their single
    literal argument, e.g. an enum's value). None if the stream cannot be decoded."""
    try:
        top = decode_pickle(payload)
    except UndecodablePickle:
        return None
    return _plain(top)


def decode_pickle(payload: bytes, max_opcodes: int = MAX_OPCODES) -> Any:
    """The pickle's top value with every object left as an inert PickledObject record.

    Nothing is imported or called: GLOBAL only records a name, REDUCE/NEWOBJ record the
    arguments, BUILD stores the state on the record. Containers are real dicts, lists and
    tuples. Marks are kept on their own stack (as pickle's own `metastack`), so each opcode costs
    O(1) however deep the stream nests. Raises UndecodablePickle for anything it cannot follow.
    """
    stack: list[Any] = []
    marks: list[int] = []  # stack heights at each MARK
    memo: dict[int, Any] = {}
    # Nesting of each tuple built, by id: tuples are immutable, so the depth set when one is
    # built stays true (a tuple freed and its id reused is recorded again when rebuilt).
    tuple_depths: dict[int, int] = {}
    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(payload)):
            if count > max_opcodes:
                raise UndecodablePickle(f"more than {max_opcodes} opcodes")
            name = op.name
            if name in _LITERAL_OPS:
                if isinstance(arg, int) and abs(arg).bit_length() > MAX_INT_BITS:
                    raise UndecodablePickle(f"an integer of more than {MAX_INT_BITS} bits")
                # genops decodes arguments; these three carry none: their value is the opcode
                stack.append(_CONSTANTS.get(name, arg))
            elif name in ("PROTO", "FRAME"):
                continue
            elif name == "STOP":
                return _top(stack)
            elif name == "MARK":
                marks.append(len(stack))
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append({} if name == "EMPTY_DICT" else () if name == "EMPTY_TUPLE" else [])
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                items = _pop(stack, marks, int(name[-1]))
                stack.append(_tuple(items, tuple_depths))
            elif name in ("TUPLE", "LIST", "DICT", "FROZENSET"):
                items = _pop_to_mark(stack, marks)
                if name == "DICT":
                    stack.append(_pairs(items))
                else:
                    stack.append(list(items) if name == "LIST" else _tuple(items, tuple_depths))
            elif name == "APPEND":
                (value,) = _pop(stack, marks, 1)
                _extend(_top(stack), [value])
            elif name in ("APPENDS", "ADDITEMS"):
                items = _pop_to_mark(stack, marks)
                _extend(_top(stack), items)
            elif name == "SETITEM":
                key, value = _pop(stack, marks, 2)
                _set_items(_top(stack), [key, value])
            elif name == "SETITEMS":
                items = _pop_to_mark(stack, marks)
                _set_items(_top(stack), items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg or 0)] = _top(stack)
            elif name == "MEMOIZE":
                memo[len(memo)] = _top(stack)
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[int(arg or 0)])
            elif name == "GLOBAL":  # arg is "module name"; it is recorded, never imported
                stack.append(PickledObject(str(arg).replace(" ", ".")))
            elif name == "STACK_GLOBAL":
                module, attribute = _pop(stack, marks, 2)
                stack.append(PickledObject(f"{module}.{attribute}"))
            elif name in ("REDUCE", "NEWOBJ"):
                callable_, args = _pop(stack, marks, 2)
                stack.append(_construct(callable_, args))
            elif name == "NEWOBJ_EX":
                callable_, args, _kwargs = _pop(stack, marks, 3)
                stack.append(_construct(callable_, args))
            elif name == "BUILD":
                (state,) = _pop(stack, marks, 1)
                target = _top(stack)
                if isinstance(target, PickledObject):
                    target.state = state
            elif name in ("BINPERSID", "PERSID"):  # a tensor storage reference in torch files
                if name == "BINPERSID":
                    _pop(stack, marks, 1)
                stack.append(PickledObject("persistent_id"))
            elif name == "POP":
                if marks and marks[-1] == len(stack):  # POP of an empty mark drops the mark
                    marks.pop()
                else:
                    _pop(stack, marks, 1)
            elif name == "POP_MARK":
                _pop_to_mark(stack, marks)
            elif name == "DUP":
                stack.append(_top(stack))
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
        tuple_depths.clear()
        raise UndecodablePickle("it describes more objects than fit in memory") from None
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as error:
        raise UndecodablePickle(str(error).splitlines()[0][:200] if str(error) else "") from error
    raise UndecodablePickle("the stream has no STOP opcode")


def torch_file_literals(path: Path) -> Any:
    """pickle_literals of a torch.save zip file's data.pkl (or of a bare pickle file)."""
    payload = pickle_payload(path)
    return None if payload is None else pickle_literals(payload)


def pickle_strings(path: Path) -> set[str] | None:
    """The string constants of a torch file's pickle (its dict keys among them), or None when it
    cannot be read. The opcodes are scanned, never executed: this tells which top-level parts a
    checkpoint has (`model`, `optimizer`, `iter_num`, ...) without loading a tensor."""
    payload = pickle_payload(path)
    if payload is None:
        return None
    try:
        return {arg for _, arg, _ in pickletools.genops(payload) if isinstance(arg, str)}
    except Exception:  # a stranger's malformed pickle: any decode failure means "not inspectable"
        return None


def pickle_payload(path: Path) -> bytes | None:
    """The pickle bytes of a torch file: a zip's data.pkl, or the whole (bare pickle) file;
    None when it cannot be read or is larger than MAX_PICKLE_BYTES."""
    if not is_regular_file(path):  # never through a link, never a FIFO
        return None
    try:
        if path.stat().st_size > MAX_PICKLE_BYTES and not zipfile.is_zipfile(path):
            return None
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return _data_pkl(archive)
        return path.read_bytes()
    except (OSError, zipfile.BadZipFile, ValueError, NotImplementedError, EOFError):
        return None


def zip_pickle(payload: bytes) -> bytes | None:
    """data.pkl of a torch zip held in memory."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            return _data_pkl(archive)
    except (OSError, zipfile.BadZipFile, ValueError, NotImplementedError, EOFError):
        return None


def _data_pkl(archive: zipfile.ZipFile) -> bytes | None:
    names = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if not names or archive.getinfo(names[0]).file_size > MAX_PICKLE_BYTES:
        return None
    return archive.read(names[0])


def _tuple(items: list[Any], tuple_depths: dict[int, int]) -> tuple[Any, ...]:
    """The tuple of `items`, refused when it would nest tuples deeper than MAX_TUPLE_NESTING."""
    depth = 1 + max(
        (tuple_depths.get(id(item), 1) for item in items if isinstance(item, tuple)), default=0
    )
    if depth > MAX_TUPLE_NESTING:
        raise NestedTooDeep(f"tuples nested more than {MAX_TUPLE_NESTING} deep")
    built = tuple(items)
    tuple_depths[id(built)] = depth
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


def _pairs(items: list[Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    _set_items(out, items)
    return out


def _set_items(target: Any, items: list[Any]) -> None:
    store = (
        target
        if isinstance(target, dict)
        else target.items
        if isinstance(target, PickledObject)
        else None
    )
    if store is None:
        return
    for key, value in zip(items[::2], items[1::2], strict=True):
        try:
            store[key] = value
        except TypeError:  # an unhashable key (a list or dict): keep its plain form
            store[repr(_plain(key))] = value


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)


def _construct(callable_: Any, args: Any) -> PickledObject:
    name = callable_.global_name if isinstance(callable_, PickledObject) else "?"
    return PickledObject(name, args if isinstance(args, tuple) else (args,))


def _plain(value: Any) -> Any:
    # Memo references can make a small pickle describe an exponentially large tree (each level
    # holding the previous one twice); the budget bounds the work whatever the file says.
    budget = [MAX_PLAIN_NODES]
    try:
        return _plain_within(value, 0, budget)
    except _TooLarge:
        return None


class _TooLarge(Exception):
    pass


def _plain_within(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, PickledObject):
        if isinstance(value.state, dict):
            return _plain_within(value.state, depth + 1, budget)
        if isinstance(value.state, tuple) and value.state and isinstance(value.state[-1], dict):
            return _plain_within(value.state[-1], depth + 1, budget)  # (dict, slots) state
        if value.items:
            return _plain_within(value.items, depth + 1, budget)
        literal = len(value.args) == 1 and not isinstance(
            value.args[0], (PickledObject, list, dict, tuple)
        )
        if literal:
            return value.args[0]  # enums and torch.device: their one literal argument
        return None
    if isinstance(value, dict):
        return {
            _plain_key(k, depth, budget): _plain_within(v, depth + 1, budget)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_plain_within(v, depth + 1, budget) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return None
    return value


def _plain_key(key: Any, depth: int, budget: list[int]) -> str:
    """Dict keys as strings; an object record used as a key is named by its plain form."""
    if isinstance(key, PickledObject):
        return repr(_plain_within(key, depth + 1, budget))
    return str(key)
