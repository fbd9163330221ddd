"""Compiled report templates kept between processes, in the user's cache folder.

Compiling case.html.j2 and case.md.j2 (and what they include) is most of a small case's render
time: 0.2–0.9 s per process depending on the machine's load, where loading the compiled code takes
~10 ms (bench/bench_startup.py). Jinja's own FileSystemBytecodeCache would do, but its files start
with a pickled checksum (tscope never unpickles) and it writes through links; this one stores
`MAGIC, the template source's SHA-1, marshal'ed code` and goes through safe_fs / output_files.

The folder is TSCOPE_CACHE_DIR/templates/<settings> (default ~/.cache/tscope/templates/…), never anywhere near
the inputs. A file is used only when the folder and the file belong to this user and nobody else
may write them (the trust Python gives its own __pycache__), its template source's checksum and
this Python and Jinja version match; anything else is compiled as if there were no cache. A cache
that cannot be written (read-only home) is skipped silently: it only ever saves time.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import stat
import sys
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.user_cache import cache_home

# Changes with the Python and Jinja versions: code compiled by another version is not loaded.
MAGIC = (
    f"tscope-template-1 py{sys.version_info[0]}.{sys.version_info[1]} jinja{jinja2.__version__}\n"
)
# Compiled case templates are ~100–300 kB; anything much larger is not ours.
MAX_CACHED_BYTES = 16 * 1024 * 1024


def template_cache_folder() -> Path:
    return cache_home() / "templates"


class UserTemplateCache(jinja2.BytecodeCache):
    """`settings` names every environment option that shapes the compiled code (autoescape,
    whitespace control, delimiters, finalize, undefined): code compiled under other settings is
    never loaded (jinja's own key is the template's name only)."""

    def __init__(self, folder: Path, settings: str) -> None:
        self.folder = folder
        self.settings = settings

    def _header(self, bucket: Bucket) -> bytes:
        return f"{MAGIC}{self.settings}\n{bucket.checksum}\n".encode()

    def _path(self, bucket: Bucket) -> Path:
        return self.folder / f"{bucket.key}.code"

    def load_bytecode(self, bucket: Bucket) -> None:
        path = self._path(bucket)
        if not (_private(self.folder) and _private(path)):
            return
        try:
            data = read_bytes_bounded(path, str(path), MAX_CACHED_BYTES)
        except (UnreadableInput, OSError):
            return
        header = self._header(bucket)
        if not data.startswith(header):
            return  # another version, or the template changed: compiled again, then replaced
        try:
            bucket.code = marshal.loads(data[len(header) :])
        except (EOFError, ValueError, TypeError):
            bucket.code = None

    def dump_bytecode(self, bucket: Bucket) -> None:
        if bucket.code is None:
            return
        from tscope.output_files import make_subfolder, write_bytes

        header = self._header(bucket)
        try:
            # The user's own cache root may not exist yet; the last level is checked as any
            # folder tscope writes into.
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            folder = make_subfolder(self.folder.parent, self.folder.name)
            if not _private(folder):
                return
            write_bytes(folder / self._path(bucket).name, header + marshal.dumps(bucket.code))
        except (UsageError, OSError):
            return  # no writable cache: the next process compiles again


def _private(path: Path) -> bool:
    """Ours, not a link, and writable by nobody else."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(status.st_mode) or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    return not hasattr(os, "getuid") or status.st_uid == os.getuid()


def environment_settings(environment: jinja2.Environment) -> str:
    """What, besides the source, decides the code an environment compiles a template to."""
    options = {
        "autoescape": environment.autoescape,
        "trim_blocks": environment.trim_blocks,
        "lstrip_blocks": environment.lstrip_blocks,
        "keep_trailing_newline": environment.keep_trailing_newline,
        "newline_sequence": environment.newline_sequence,
        "delimiters": (
            environment.block_start_string,
            environment.block_end_string,
            environment.variable_start_string,
            environment.variable_end_string,
            environment.comment_start_string,
            environment.comment_end_string,
            environment.line_statement_prefix,
            environment.line_comment_prefix,
        ),
        "finalize": getattr(environment.finalize, "__qualname__", repr(environment.finalize)),
        "undefined": environment.undefined.__qualname__,
        "extensions": sorted(environment.extensions),
        "optimized": environment.optimized,
    }
    return repr(sorted(options.items()))


def attach_user_cache(environment: jinja2.Environment) -> jinja2.Environment:
    """The environment, with the user cache unless TSCOPE_TEMPLATE_CACHE=0 turns it off."""
    if os.environ.get("TSCOPE_TEMPLATE_CACHE", "1") != "0":
        settings = environment_settings(environment)
        # One folder per settings: jinja keys a template by its name only, and the HTML and the
        # Markdown environments would otherwise replace each other's compiled includes.
        digest = hashlib.sha1(settings.encode(), usedforsecurity=False).hexdigest()[:16]
        environment.bytecode_cache = UserTemplateCache(template_cache_folder() / digest, settings)
    return environment
