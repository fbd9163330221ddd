"""URLs tscope does not read from: refused in one line before fsspec sees them.

`zip://a::file:///etc/passwd` (a chained URL) got past the file:// refusal and read a local file
(BadZipFile traceback); `tar://…` ended in ReadError, `reference://x` in TypeError and
`github://a:b@/` in a network traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile import run_tscope

from tscope.errors import TscopeError, UsageError
from tscope.ingest import remote_source


@pytest.mark.parametrize(
    "url",
    ["zip://a::file:///etc/passwd", "tar://a::file:///etc/passwd", "s3://a/b::file:///etc/passwd"],
)
def test_a_chained_url_is_refused(url: str):
    with pytest.raises(UsageError, match="chained URLs"):
        remote_source.open_filesystem(url)


@pytest.mark.parametrize("url", ["reference://x", "github://a:b@/", "memory://run", "zip://a"])
def test_a_protocol_outside_the_object_stores_is_refused(url: str):
    with pytest.raises(UsageError, match="tscope reads runs from object stores"):
        remote_source.open_filesystem(url)


def test_any_failure_of_fsspec_itself_is_one_line(monkeypatch: pytest.MonkeyPatch):
    fsspec = pytest.importorskip("fsspec")

    def broken(url: str, **options: object) -> None:
        raise TypeError("expected str, bytes or os.PathLike object, not NoneType")

    monkeypatch.setattr(fsspec.core, "url_to_fs", broken)
    with pytest.raises(TscopeError, match=r"Cannot read s3://bucket/run: TypeError"):
        remote_source.open_filesystem("s3://bucket/run")


def test_a_chained_url_on_the_command_line_is_one_line(tmp_path: Path):
    outcome = run_tscope("analyze", "zip://a::file:///etc/passwd", "--out", tmp_path / "out")
    outcome.assert_one_line_error("chained URLs")
