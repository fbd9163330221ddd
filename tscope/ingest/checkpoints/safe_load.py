"""torch.load that never executes a stranger's pickle unless the user explicitly trusts the file.

Beyond `weights_only=True`, a loaded file is held to what it actually contains:
- it must be a regular file reached without a symlink, and not a Git LFS pointer;
- a zip-format file must store its records uncompressed (as torch.save does), so the bytes its
  tensors own are bytes present in the file (the archive checks live in torch_zip_checks.py);
- no tensor may be a view larger than its storage (a stride-0 `expand(1 << 33)` of one element
  is 1.7 KB on disk and 32 GiB once statistics touch it). Such a file is refused as a whole,
  naming the tensor: statistics of a broadcast view would describe a tensor nobody trained.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.pickle_decoder import (
    MAX_TUPLE_NESTING,
    UndecodablePickle,
    decode_pickle,
)
from tscope.ingest.checkpoints.pickle_literals import decode_budget, pickle_payload, zip_pickle
from tscope.ingest.checkpoints.pickle_nesting import UnreadableZip, torch_pickles_nest_too_deep
from tscope.ingest.checkpoints.torch_zip_checks import (
    DAMAGED_ZIP_HINT,
    damaged_zip,
    zip_records_check,
)
from tscope.ingest.lfs_pointer import refuse_lfs_pointer
from tscope.ingest.safe_fs import (
    NOT_REGULAR,
    SYMLINK_REFUSED,
    is_regular_file,
    open_regular,
    pinned_path,
)
from tscope.model.visible_text import visible

TRUST_HINT = "If you trust the file, pass --trust-pickle."
# torch's messages when weights_only meets a global (or a BUILD) outside its allow-list; only
# then can --trust-pickle change the outcome. Every other failure is a damaged or foreign file.
# "whose module os is blocked" is torch's message for a global of a module it blocks outright
# (os, posix, sys, subprocess, ...): without it an `os.system` pickle read as torch's generic
# paragraph ("Weights only load failed. In PyTorch 2.6, ...") instead of a refused global.
_REFUSED_GLOBAL_MARKERS = (
    "Unsupported global",
    "was not an allowed global",
    "allowlisted via",
    "is blocked",
)
# The generic paragraphs torch wraps around a weights_only failure: never the reason itself.
_TORCH_BOILERPLATE = ("Weights only load failed.", "Check the documentation of torch.load")
# Containers walked after a load to check every tensor; a state dict has a few per parameter.
MAX_OBJECTS_CHECKED = 10_000_000
# Containers nested inside one another (a state dict nests under 10); the limit of the JSON and
# pickle decoders' nesting too.
MAX_CONTAINER_NESTING = 100
# A reported tensor's path: each key cut to KEY_CHARS characters, the first and last PATH_KEYS.
KEY_CHARS = 60
PATH_KEYS = 8


def _numpy_rng_globals() -> list[Any]:
    """The numpy objects a saved np.random.get_state() tuple needs, as the HF Trainer allows them
    (trainer_pt_utils.safe_globals): _reconstruct, ndarray, dtype and the UInt32 dtype class."""
    import importlib

    import numpy as np

    allowed: list[Any] = [np.ndarray, np.dtype]
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    allowed.append(multiarray._reconstruct)
    allowed.append(type(np.dtype(np.uint32)))
    return allowed


def safe_torch_load(
    path: Path, display_path: str, options: LoadOptions, *, allow_numpy: bool = False
) -> Any:
    """Load a torch file with weights_only=True (tensors, dicts, lists, numbers, strings only).

    `allow_numpy` adds the numpy globals that RNG state files hold. A global outside the safe set
    is refused with a message naming the file and the --trust-pickle opt-in; with trust_pickle
    the file is loaded with weights_only=False and a warning on stderr, because that runs code
    from the file. Every other failure is one explained line (UnreadableInput).
    """
    _check_file(path, display_path)
    # One descriptor from the first check to torch.load: given the path again, torch opened
    # whatever was there by then, and a file swapped after the checks for a link (to a file
    # outside the input) or a FIFO was loaded, or hung the run (red team, session 27).
    with open_regular(path, display_path) as handle:
        size = os.fstat(handle.fileno()).st_size
        zipped = zip_records_check(handle, size, display_path)
        if not options.trust_pickle:
            handle.seek(0)
            _refuse_deep_nesting(handle, size, display_path)
        handle.seek(0)
        source = pinned_path(handle)
        return _load(
            source if source is not None else handle,
            zipped and source is not None,  # mmap needs a name; without one the file is read
            display_path,
            options,
            allow_numpy,
            lambda: pickle_payload(handle),
        )


def safe_torch_loads(payload: bytes, display_path: str, options: LoadOptions) -> Any:
    """safe_torch_load of bytes already read (a DCP bytes item): nothing is written to disk."""
    zip_records_check(io.BytesIO(payload), len(payload), display_path)
    if not options.trust_pickle:
        _refuse_deep_nesting(io.BytesIO(payload), len(payload), display_path)
    return _load(io.BytesIO(payload), False, display_path, options, False, lambda: payload)


def _refuse_deep_nesting(handle: BinaryIO, size: int, display_path: str) -> None:
    """torch's weights_only unpickler hashes what a pickle builds as a dict key; tuples nested a
    million deep crash the process in that hash (SIGSEGV, not an exception), so the file's
    pickles are walked first by the inert decoder."""
    try:
        too_deep = torch_pickles_nest_too_deep(handle, size)
    except UnreadableZip as error:  # read by zip_records_check a moment ago: changed since
        raise UnreadableInput(display_path, damaged_zip(error.reason), DAMAGED_ZIP_HINT) from error
    if too_deep:
        raise UnreadableInput(
            display_path, f"its pickle nests tuples more than {MAX_TUPLE_NESTING} deep"
        )


def warn_trusted_unpickling(display_path: str) -> None:
    """The stderr line before a file is unpickled under --trust-pickle; the name is a
    stranger's, escaped (an ESC or BEL in it would drive the user's terminal)."""
    print(
        f"tscope: warning: unpickling {visible(display_path)} with --trust-pickle: this runs "
        "code from the file.",
        file=sys.stderr,
    )


def _load(
    source: Path | BinaryIO,
    mmap: bool,
    display_path: str,
    options: LoadOptions,
    allow_numpy: bool,
    pickle_bytes: Callable[[], bytes | None],
) -> Any:
    import torch

    if options.trust_pickle:
        warn_trusted_unpickling(display_path)
    try:
        # torch warns on stderr about what it meets in a file ("Detected pickle protocol 4 in
        # the checkpoint"): noise about a stranger's file, on the user's terminal. What matters
        # (a refusal, a failure) is raised and becomes the file's one `partial` line below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if options.trust_pickle:
                loaded = torch.load(source, map_location="cpu", weights_only=False, mmap=mmap)
            elif allow_numpy:
                with torch.serialization.safe_globals(_numpy_rng_globals()):
                    loaded = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
            else:
                loaded = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # a stranger's file: every failure becomes one explained line
        text = str(error)
        refused = any(marker in text for marker in _REFUSED_GLOBAL_MARKERS)
        # torch's weights-only reader also stops at opcodes it does not implement (FRAME in a
        # protocol-4 pickle): the file is still a real pickle that --trust-pickle would load.
        if refused or ("Unsupported operand" in text and _is_real_pickle(pickle_bytes())):
            raise UnreadableInput(
                display_path, "it holds pickled objects outside the safe set", TRUST_HINT
            ) from error
        raise UnreadableInput(
            display_path, f"not a readable torch file ({_torch_failure(error)})"
        ) from error
    problem = tensor_backing_problem(loaded)
    if problem:
        raise UnreadableInput(display_path, problem)
    return loaded


def _check_file(path: Path, display_path: str) -> None:
    refuse_lfs_pointer(path, display_path)
    if not is_regular_file(path):
        raise UnreadableInput(
            display_path, SYMLINK_REFUSED if os.path.islink(path) else NOT_REGULAR
        )


class _Where(NamedTuple):
    """Where a value sits in what torch loaded, as a link to its container's place: the text is
    built only for the tensor reported. Building "a.b.c" for every value cost the product of
    depth and key length per value: a chain of dicts keyed by one memoized 1000-character
    string (27 KB) took 9 s, and 102 KB over a minute."""

    parent: _Where | None
    key: Any  # a dict key, or the index in a list or tuple
    indexed: bool  # a list or tuple index, shown as [i]
    depth: int  # containers above the value


def _unusual_tensor_kind(tensor: Any) -> str:
    """'' for a dense tensor in memory, else what it is instead."""
    import torch

    if tensor.layout != torch.strided:
        return f"a {str(tensor.layout).removeprefix('torch.')} tensor"
    if tensor.is_nested:
        return "a nested tensor"
    if tensor.is_quantized:
        return "a quantized tensor"
    if tensor.device.type == "meta":
        return "a meta tensor (a shape with no data)"
    return ""


def tensor_backing_problem(loaded: Any) -> str:
    """'' when every tensor in `loaded` is backed by its own bytes, else what is wrong.

    A tensor whose numel x element size exceeds its storage's bytes overlaps itself (stride 0,
    or strides that revisit elements): computing statistics would materialize the full view.
    Containers nested past MAX_CONTAINER_NESTING refuse the file: torch's unpickler builds a
    million-deep chain of dicts from 5 bytes a level, and real checkpoints nest under 10.
    """
    import torch

    pending: list[tuple[_Where | None, Any]] = [(None, loaded)]
    seen: set[int] = set()
    budget = MAX_OBJECTS_CHECKED
    while pending:
        where, value = pending.pop()
        budget -= 1
        if budget < 0:
            return f"it holds more than {MAX_OBJECTS_CHECKED} objects; tscope does not read it"
        if isinstance(value, torch.Tensor):
            unusual = _unusual_tensor_kind(value)
            if unusual:
                # weights_only admits them, and the statistics cannot read them: a meta tensor
                # has no data (and may claim 10^12 elements), a sparse one no strided storage
                # (red team, session 27: tracebacks, exit 1).
                return (
                    f"tensor {_where_text(where)} is {unusual}; tscope reads dense tensors whose "
                    "data the file holds"
                )
            claimed = value.numel() * value.element_size()
            held = value.untyped_storage().nbytes()
            if claimed > held:
                strides = list(value.stride())
                return (
                    f"tensor {_where_text(where)} is a view of {claimed} bytes over a storage "
                    f"of {held} bytes (shape {list(value.shape)}, strides {strides}); tscope "
                    "does not expand views larger than the data in the file"
                )
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        depth = where.depth + 1 if where else 1
        if isinstance(value, (dict, list, tuple)) and depth > MAX_CONTAINER_NESTING:
            return (
                f"it nests containers more than {MAX_CONTAINER_NESTING} deep (at "
                f"{_where_text(where)}); tscope does not read it"
            )
        if isinstance(value, dict):
            pending.extend((_Where(where, key, False, depth), v) for key, v in value.items())
        elif isinstance(value, (list, tuple)):
            pending.extend((_Where(where, i, True, depth), v) for i, v in enumerate(value))
    return ""


def _where_text(where: _Where | None) -> str:
    """ "model.layers[0].weight", each key cut to KEY_CHARS characters and the path to its first
    and last PATH_KEYS keys (a crafted key or path can be megabytes)."""
    if where is None:
        return "(top level)"
    steps: list[_Where] = []
    link: _Where | None = where
    while link is not None:  # at most MAX_CONTAINER_NESTING + 1 links
        steps.append(link)
        link = link.parent
    steps.reverse()
    shown: list[_Where | None] = list(steps)
    if len(steps) > 2 * PATH_KEYS:
        shown = [*steps[:PATH_KEYS], None, *steps[-PATH_KEYS:]]
    text = ""
    for step in shown:
        if step is None:
            text += ".…"
        elif step.indexed:
            text += f"[{step.key}]"
        else:
            text += ("." if text else "") + key_text(step.key)
    return text


def key_text(key: Any) -> str:
    """A dict key as text, without calling str() on what a stranger chose: an int of thousands
    of digits raises, and a tuple of long strings is as long as they are."""
    if isinstance(key, str):
        return key if len(key) <= KEY_CHARS else key[:KEY_CHARS] + "…"
    if isinstance(key, (bool, float)) or (isinstance(key, int) and key.bit_length() <= 64):
        return str(key)
    return f"<{type(key).__name__}>"


def _is_real_pickle(payload: bytes | None) -> bool:
    """The file's pickle (data.pkl of a zip, else the file) decodes as a complete stream."""
    if payload is None:
        return False
    if payload[:4] == b"PK\x03\x04":  # bytes of a zip: its data.pkl
        payload = zip_pickle(payload)
        if payload is None:
            return False
    try:
        # Within the decoders' memory bound (pickle_literals.decode_budget): a crafted stream
        # that would hold more is no pickle --trust-pickle should be offered for.
        decode_pickle(payload, max_decoded_bytes=decode_budget(len(payload)))
    except UndecodablePickle:  # DecodeBudgetExceeded included
        return False
    return True


def _torch_failure(error: Exception) -> str:
    """The informative line of torch's error: weights_only failures wrap the real reason after
    a generic paragraph ("Weights only load failed. In PyTorch 2.6, ...")."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    if "WeightsUnpickler error:" in text:
        reason = text.split("WeightsUnpickler error:", 1)[1].strip()
        text = reason or text
    lines = [line for line in text.splitlines() if line.strip()]
    # torch's own paragraphs say nothing of the file: the first other line is the reason.
    specific = [line for line in lines if not line.lstrip().startswith(_TORCH_BOILERPLATE)]
    lines = specific or lines
    if isinstance(error, (KeyError, IndexError)) and lines:
        # str(KeyError(5)) is "5": a memo reference to nothing, which alone tells nobody anything
        return f"{type(error).__name__} {lines[0][:180]} while unpickling"
    return lines[0][:200] if lines else type(error).__name__
