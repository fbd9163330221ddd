"""A run in an object store (`s3://bucket/run/`, `gs://…`, `hf://…`, any fsspec URL): listed and
read through fsspec, with every failure turned into one line that says what to do.

fsspec (and the backend for the URL's scheme: s3fs, gcsfs, huggingface_hub) is the optional
`remote` extra; it is imported only here, only when a URL is given. Credentials and endpoints come
from where each backend already looks (AWS_* variables or ~/.aws for s3fs, `gcloud auth` for gcsfs,
HF_TOKEN for hf://) and from fsspec's own configuration (`FSSPEC_S3_ENDPOINT_URL=…`).

Names in a listing come from a stranger's bucket: each is checked before it becomes a local path
(`safe_relative_parts`) — no `..`, nothing absolute, no empty or over-long component, no control
character — and links (fsspec's local or SFTP backends can list them) are never followed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tscope.errors import TscopeError, UsageError

# scheme://rest: a URL, not a local path (a Windows drive letter "C:\\" has no "//").
_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
# fsspec's local backend follows links while listing; a local run is read by the local pipeline.
_LOCAL_SCHEMES = {"file", "local"}
INSTALL_HINT = "pip install 'tscope-ml[remote]'"
# Backends fsspec names but that are not in the `remote` extra: the package to install.
_BACKEND_PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "hf": "huggingface_hub",
    "az": "adlfs",
    "abfs": "adlfs",
}
# The object stores a run is read from (README, "Runs in object stores"). Every other fsspec
# protocol is refused before fsspec sees the URL: `zip://a::file:///etc/passwd` (a chained URL)
# read a local file past the file:// refusal and ended in a BadZipFile traceback, `tar://` in
# ReadError, `reference://x` in TypeError, `github://a:b@/` in a network traceback.
SUPPORTED_SCHEMES = ("s3", "s3a", "gs", "gcs", "hf", "az", "abfs", "abfss")
# fsspec's separator of chained URLs (`outer://path::inner://path`): one store per URL here.
_CHAIN_SEPARATOR = "::"
# A listing beyond this many files is refused rather than mirrored: a run folder holds hundreds
# (a sharded DCP checkpoint a few thousand per step); a bucket prefix of millions is a mistake.
MAX_LISTED_FILES = 200_000
# Path components and depth a local filesystem accepts everywhere (ext4, APFS: 255 bytes).
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RemoteUnavailable(TscopeError):
    """The store cannot be listed or read: no credentials, no such bucket, endpoint unreachable."""


@dataclass(frozen=True)
class RemoteFile:
    parts: tuple[str, ...]  # path components below the run's root, checked
    size: int
    version: str | None  # ETag / generation / mtime: a cached copy is reused only if it matches

    @property
    def display(self) -> str:
        return "/".join(self.parts)


@dataclass(frozen=True)
class RemoteListing:
    url: str  # as the user gave it
    root: str  # the fsspec path of the root (no scheme)
    is_file: bool  # the URL names one object, not a folder
    files: tuple[RemoteFile, ...]
    refused: tuple[tuple[str, str], ...]  # (name as listed, why it is not mirrored)


def is_remote_url(text: str) -> bool:
    return _URL.match(text) is not None


def local_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """The inputs that are local paths (a URL is never a folder an output could land in)."""
    return [Path(p) for p in paths if not (isinstance(p, str) and is_remote_url(p))]


def url_name(url: str) -> str:
    """The run's name: the URL's last path component (`s3://b/runs/exp7/` -> `exp7`)."""
    match = _URL.match(url)
    rest = match["rest"] if match else url
    parts = [p for p in rest.split("/") if p]
    return parts[-1] if parts else "remote"


def open_filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(fsspec filesystem, root path) for `url`; one-line errors for what the user must fix."""
    match = _URL.match(url)
    if match is None:
        raise UsageError(f"{url} is not a URL (scheme://…).")
    scheme = match["scheme"].lower()
    if scheme in _LOCAL_SCHEMES:
        raise UsageError(f"{url}: pass the local path itself ({match['rest']}), not a file:// URL.")
    if _CHAIN_SEPARATOR in url:
        raise UsageError(
            f"{url[:200]}: chained URLs ('::') are not read; give one object-store URL "
            f"({', '.join(s + '://' for s in SUPPORTED_SCHEMES)}), or a local path."
        )
    if scheme not in SUPPORTED_SCHEMES:
        raise UsageError(
            f"{url[:200]}: tscope reads runs from object stores "
            f"({', '.join(s + '://' for s in SUPPORTED_SCHEMES)}), not {scheme}://; copy the run "
            "to a local folder and pass its path."
        )
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f"Reading {url} needs fsspec and the backend for {scheme}://: {INSTALL_HINT}"
        ) from None
    try:
        filesystem, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as error:
        package = _BACKEND_PACKAGES.get(scheme, "the fsspec backend for it")
        raise UsageError(
            f"Reading {scheme}:// URLs needs {package} ({INSTALL_HINT} covers s3://; "
            f"pip install {package} for {scheme}://): {str(error).splitlines()[0][:200]}"
        ) from None
    except ValueError as error:  # options the backend rejects
        raise UsageError(f"{url}: {str(error).splitlines()[0][:200]}") from None
    except Exception as error:  # a backend's own classes (network, credentials): one line each
        raise unavailable(url, error) from None
    return filesystem, str(root).rstrip("/")


def list_run(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, RemoteListing]:
    """Every object under the URL, names checked; RemoteUnavailable when it cannot be listed."""
    filesystem, root = open_filesystem(url, storage_options)
    try:
        info = filesystem.info(root)
        if info.get("type") == "file":
            entries = {root: info}
            is_file = True
        else:
            entries = filesystem.find(root, detail=True, withdirs=False)
            is_file = False
    except Exception as error:  # backends raise their own classes; each becomes one line
        raise unavailable(url, error) from None
    if not entries:
        raise RemoteUnavailable(
            f"Cannot read {url}: nothing is stored there. Check the bucket and prefix."
        )
    if len(entries) > MAX_LISTED_FILES:
        raise UsageError(
            f"{url} lists more than {MAX_LISTED_FILES} files; point tscope at one run's folder."
        )
    files, refused = [], []
    for full_name, detail in sorted(entries.items()):
        name = str(full_name)
        relative = Path(name).name if is_file else _below(name, root)
        parts, problem = safe_relative_parts(relative)
        if problem is None and detail.get("type") not in (None, "file"):
            problem = f"a {detail.get('type')}, not a regular object; not followed"
        if problem is None and detail.get("islink"):
            problem = "a symbolic link; not followed"
        if problem is not None:
            refused.append((relative, problem))
            continue
        size = detail.get("size")
        if not isinstance(size, int) or size < 0:
            refused.append((relative, "the store gives no size for it"))
            continue
        files.append(RemoteFile(parts, size, _version(detail)))
    listing = RemoteListing(url, root, is_file, tuple(files), tuple(refused))
    return filesystem, listing


def _below(name: str, root: str) -> str:
    prefix = root + "/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def safe_relative_parts(relative: str) -> tuple[tuple[str, ...], str | None]:
    """The components of a listed name, or why it cannot become a path under the cache folder."""
    if relative.startswith("/") or "\\" in relative:
        return (), "an absolute or backslashed name; not mirrored"
    parts = tuple(relative.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        return (), "a name with an empty, '.' or '..' component; not mirrored"
    if len(parts) > MAX_DEPTH:
        return (), f"nested more than {MAX_DEPTH} folders deep; not mirrored"
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES for part in parts):
        return (), f"a name component over {MAX_COMPONENT_BYTES} bytes; not mirrored"
    if any(_CONTROL.search(part) for part in parts):
        return (), "a name with control characters; not mirrored"
    return parts, None


def _version(detail: dict[str, Any]) -> str | None:
    for key in ("ETag", "etag", "generation", "md5Hash", "blob_id", "LastModified", "mtime"):
        value = detail.get(key)
        if value not in (None, ""):
            return str(value)
    return None


# Exception class names (botocore, aiohttp, google-auth, huggingface_hub) -> what to do.
_CREDENTIALS = (
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "DefaultCredentialsError",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
)
_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ConnectionError",
    "TimeoutError",
    "ReadTimeoutError",
)
_CREDENTIAL_HINTS = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (see `aws configure`)",
    "gs": "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
    "gcs": "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
    "hf": "set HF_TOKEN or run `huggingface-cli login`",
}


def unavailable(url: str, error: BaseException) -> RemoteUnavailable:
    """One line for a failed listing or read: what went wrong and what to do."""
    scheme = (_URL.match(url) or _URL.match("x://"))["scheme"].lower()  # type: ignore[index]
    names = {type(e).__name__ for e in _chain(error)}
    detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    if names & set(_CREDENTIALS):
        hint = _CREDENTIAL_HINTS.get(scheme, "give the backend its credentials")
        return RemoteUnavailable(f"Cannot read {url}: no valid credentials ({detail}); {hint}.")
    if names & set(_UNREACHABLE) or isinstance(error, (ConnectionError, TimeoutError)):
        return RemoteUnavailable(
            f"Cannot reach {url}: the endpoint does not answer ({detail}). Check the network and "
            "the endpoint (AWS_ENDPOINT_URL / FSSPEC_S3_ENDPOINT_URL for an S3-compatible store)."
        )
    if isinstance(error, PermissionError):
        hint = _CREDENTIAL_HINTS.get(scheme, "check the credentials")
        return RemoteUnavailable(f"Cannot read {url}: access denied ({detail}); {hint}.")
    if isinstance(error, FileNotFoundError):
        return RemoteUnavailable(f"Cannot read {url}: no such bucket or path. Check the URL.")
    return RemoteUnavailable(f"Cannot read {url}: {type(error).__name__}: {detail}.")


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
