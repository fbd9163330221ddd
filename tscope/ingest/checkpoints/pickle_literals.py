"""Recover plain data from a pickle without importing or calling anything.

`training_args.bin` is a pickled TrainingArguments: reading it with pickle or torch.load would
import transformers and run whatever the file names. Here the opcodes are walked by
`pickletools.genops` (a decoder, not an unpickler) and only literals are rebuilt: dicts, lists,
tuples, strings, numbers, booleans and None. Every object the pickle would construct stays an
inert record of the global's *name* and its arguments; nothing is ever looked up or called.
"""

from __future__ import annotations

import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_PICKLE_BYTES = 16 * 1024 * 1024  # TrainingArguments pickles are ~5 kB
MAX_OPCODES = 2_000_000
MAX_PLAIN_NODES = 1_000_000  # values rebuilt from one pickle
MAX_DEPTH = 50


@dataclass
class _Object:
    """What the pickle would have built: the global's name, its arguments, its state."""

    global_name: str
    args: tuple[Any, ...] = ()
    state: Any = None
    items: dict[Any, Any] = field(default_factory=dict)  # SETITEMS on a dict subclass


class _Mark:
    pass


_MARK = _Mark()
_LITERAL_OPS = {
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "BYTEARRAY8",
}  # fmt: skip


def pickle_literals(payload: bytes) -> Any:
    """The pickle's top value as plain data; objects become their state dict (or their single
    literal argument, e.g. an enum's value). None if the stream cannot be decoded."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(payload)):
            if count > MAX_OPCODES:
                return None
            name = op.name
            if name in _LITERAL_OPS:
                # genops decodes arguments; these three carry none: their value is the opcode
                stack.append({"NEWTRUE": True, "NEWFALSE": False, "NONE": None}.get(name, arg))
            elif name in ("PROTO", "FRAME"):
                continue
            elif name == "STOP":
                return _plain(stack[-1]) if stack else None
            elif name == "MARK":
                stack.append(_MARK)
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append({} if name == "EMPTY_DICT" else () if name == "EMPTY_TUPLE" else [])
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                size = int(name[-1])
                items = stack[-size:]
                del stack[-size:]
                stack.append(tuple(items))
            elif name in ("TUPLE", "LIST", "DICT", "FROZENSET"):
                items = _pop_to_mark(stack)
                stack.append(_pairs(items) if name == "DICT" else tuple(items))
            elif name == "APPEND":
                value = stack.pop()
                _extend(stack[-1], [value])
            elif name in ("APPENDS", "ADDITEMS"):
                items = _pop_to_mark(stack)
                _extend(stack[-1], items)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _set_items(stack[-1], [key, value])
            elif name == "SETITEMS":
                items = _pop_to_mark(stack)
                _set_items(stack[-1], items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg or 0)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[int(arg or 0)])
            elif name == "GLOBAL":  # arg is "module name"; it is recorded, never imported
                stack.append(_Object(str(arg).replace(" ", ".")))
            elif name == "STACK_GLOBAL":
                attribute, module = stack.pop(), stack.pop()
                stack.append(_Object(f"{module}.{attribute}"))
            elif name in ("REDUCE", "NEWOBJ"):
                args, callable_ = stack.pop(), stack.pop()
                stack.append(_construct(callable_, args))
            elif name == "NEWOBJ_EX":
                _kwargs, args, callable_ = stack.pop(), stack.pop(), stack.pop()
                stack.append(_construct(callable_, args))
            elif name == "BUILD":
                state = stack.pop()
                if isinstance(stack[-1], _Object):
                    stack[-1].state = state
            elif name in ("BINPERSID", "PERSID"):  # a tensor storage reference in torch files
                if name == "BINPERSID":
                    stack.pop()
                stack.append(_Object("persistent_id"))
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                _pop_to_mark(stack)
            elif name == "DUP":
                stack.append(stack[-1])
            else:  # INST, OBJ, EXT*: old or rare forms; give up rather than guess
                return None
    except (ValueError, IndexError, KeyError, TypeError):  # malformed stream
        return None
    return None


def torch_file_literals(path: Path) -> Any:
    """pickle_literals of a torch.save zip file's data.pkl (or of a bare pickle file)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.endswith("data.pkl")]
                if not names or archive.getinfo(names[0]).file_size > MAX_PICKLE_BYTES:
                    return None
                payload = archive.read(names[0])
        else:
            if path.stat().st_size > MAX_PICKLE_BYTES:
                return None
            payload = path.read_bytes()
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    return pickle_literals(payload)


def _pop_to_mark(stack: list[Any]) -> list[Any]:
    index = max(i for i, item in enumerate(stack) if item is _MARK)
    items = stack[index + 1 :]
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
        if isinstance(target, _Object)
        else None
    )
    if store is None:
        return
    for key, value in zip(items[::2], items[1::2], strict=True):
        try:
            store[key] = value
        except TypeError:  # an unhashable key (an object record): keep its name
            store[repr(_plain(key))] = value


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)


def _construct(callable_: Any, args: Any) -> _Object:
    name = callable_.global_name if isinstance(callable_, _Object) else "?"
    return _Object(name, args if isinstance(args, tuple) else (args,))


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
    if isinstance(value, _Object):
        if isinstance(value.state, dict):
            return _plain_within(value.state, depth + 1, budget)
        if isinstance(value.state, tuple) and value.state and isinstance(value.state[-1], dict):
            return _plain_within(value.state[-1], depth + 1, budget)  # (dict, slots) state
        if value.items:
            return _plain_within(value.items, depth + 1, budget)
        if len(value.args) == 1 and not isinstance(value.args[0], (_Object, list, dict, tuple)):
            return value.args[0]  # enums and torch.device: their one literal argument
        return None
    if isinstance(value, dict):
        return {str(k): _plain_within(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_within(v, depth + 1, budget) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return None
    return value
