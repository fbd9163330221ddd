"""A seal on the per-run cache `tscope cluster` keeps in its output folder: only a cache this
user's tscope wrote is reused.

A run's cache (`<out>/runs/<run>/`: case.json, series.npz, inputs.json) is reused when the
fingerprint of its inputs matches; a fingerprint is file names, sizes and modification times,
which a tarball carries. An output folder that arrives with the runs could so hand the report a
forged case (a run that blew up shown stable) or a crafted series.npz (a deflated member that
expands to gigabytes). The seal is an HMAC over the fingerprint and the cached files' bytes, keyed
by a random key that stays in this user's cache directory (user_cache.cache_home): a cache written
anywhere else fails it, and its run is analyzed again. Without a usable key nothing is sealed and
nothing is reused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.safe_fs import open_regular
from tscope.user_cache import cache_home

KEY_FILE = "cluster-cache.key"
KEY_BYTES = 32


def seal_key(create: bool = False) -> bytes | None:
    """This user's key; made (0600, never through a link) when `create` and none exists yet."""
    path = cache_home() / KEY_FILE
    try:
        with open_regular(path, KEY_FILE) as handle:
            key = handle.read(KEY_BYTES + 1)
        return key if len(key) == KEY_BYTES else None
    except (OSError, UnreadableInput):
        if not create:
            return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None  # a read-only home, or another process made it first: read it next time
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    return key


def seal(fingerprint: dict[str, Any], *contents: bytes) -> str | None:
    """The HMAC of the fingerprint and each cached file's bytes; None without a key."""
    key = seal_key()
    if key is None:
        return None
    mac = hmac.new(key, json.dumps(fingerprint, sort_keys=True).encode(), hashlib.sha256)
    for content in contents:
        mac.update(hashlib.sha256(content).digest())
    return mac.hexdigest()


def is_sealed(fingerprint: dict[str, Any], stored_seal: object, *contents: bytes) -> bool:
    expected = seal(fingerprint, *contents)
    return (
        expected is not None
        and isinstance(stored_seal, str)
        and hmac.compare_digest(expected, stored_seal)
    )
