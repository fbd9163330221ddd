"""Remote runs (s3://) against a real S3-compatible server: moto's server mode, started here on a
free local port and spoken to over HTTP by s3fs exactly as AWS would be. No client is mocked."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

from tscope.errors import TscopeError  # noqa: E402
from tscope.ingest.remote_mirror import SNIFF_BYTES, mirror_run  # noqa: E402
from tscope.ingest.remote_source import RemoteUnavailable, safe_relative_parts  # noqa: E402
from tscope.pipeline import analyze  # noqa: E402
from tscope.render import render_case  # noqa: E402

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer" / "lr_jump"
BUCKET = "runs"
# A dataset shard beside the run: text no reader claims, several times the sniffing window.
SHARD_BYTES = 5 * SNIFF_BYTES
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _clear_s3fs_instances() -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # fsspec reuses a filesystem per set of arguments


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, **_boto_credentials())
    client.create_bucket(Bucket=BUCKET)
    for file in sorted(RUN.rglob("*")):
        if file.is_file():
            client.upload_file(str(file), BUCKET, f"lr_jump/{file.relative_to(RUN).as_posix()}")
    shard = b"".join(b'{"text": "%06d the quick brown fox"}\n' % i for i in range(20_000))
    client.put_object(Bucket=BUCKET, Key="lr_jump/data/train.jsonl", Body=shard[:SHARD_BYTES])
    yield url
    server.stop()


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


@pytest.fixture
def s3_env(endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Credentials and endpoint where botocore looks for them; a fresh cache folder."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(cache))
    _clear_s3fs_instances()
    return cache


def _case_json_text(case: object, folder: Path) -> str:
    render_case(case, folder, ("json",))  # type: ignore[arg-type]
    return (folder / "case.json").read_text()


def test_s3_run_gives_the_same_case_as_the_local_copy(s3_env: Path, tmp_path: Path) -> None:
    remote = _case_json_text(analyze("s3://runs/lr_jump/"), tmp_path / "remote")
    local = _case_json_text(analyze(RUN), tmp_path / "local")
    assert json.loads(remote)["run"]["path"] == "s3://runs/lr_jump/"
    # The input's name is the only difference: run.path, and the replay command, which asks for
    # a local copy (replay runs the model on local files).
    copy_first = " Replay reads local files: copy the run from s3://runs/lr_jump/ first."
    assert copy_first in remote
    remote = remote.replace(copy_first, "").replace(
        "tscope replay LOCAL_COPY", f"tscope replay {RUN}"
    )
    assert remote.replace("s3://runs/lr_jump/", str(RUN)) == local
    assert any(f["category"] == "lr_schedule_jump" for f in json.loads(remote)["findings"])


def _listed_sizes() -> dict[str, int]:
    sizes = {f.relative_to(RUN).as_posix(): f.stat().st_size for f in RUN.rglob("*") if f.is_file()}
    return {**sizes, "data/train.jsonl": SHARD_BYTES}


def _header_bytes(path: Path) -> int:
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def test_bytes_fetched_are_what_the_analysis_reads(s3_env: Path) -> None:
    sizes = _listed_sizes()
    safetensors = [name for name in sizes if name.endswith(".safetensors")]
    assert len(safetensors) == 3

    logs_only = mirror_run("s3://runs/lr_jump/", read_weights=False, cache_dir=s3_env / "a")
    stats = logs_only.stats
    assert stats.listed_files == len(sizes) and stats.listed_bytes == sum(sizes.values())
    # Every other file whole, each safetensors file only its header, the shard its first 64 KiB.
    expected = (
        sum(size for name, size in sizes.items() if name not in safetensors)
        - SHARD_BYTES
        + SNIFF_BYTES
        + sum(_header_bytes(RUN / name) for name in safetensors)
    )
    assert stats.fetched_bytes == expected
    assert stats.ranged_files == 3 and stats.left_out_files == 1
    assert not (logs_only.root / "data" / "train.jsonl").exists()

    with_weights = mirror_run("s3://runs/lr_jump/", cache_dir=s3_env / "b")
    assert with_weights.stats.fetched_bytes < with_weights.stats.listed_bytes
    assert with_weights.stats.fetched_bytes > stats.fetched_bytes
    # The mirrored checkpoint holds the original bytes of every tensor that gets statistics.
    from safetensors import safe_open

    for name in safetensors:
        with (
            safe_open(RUN / name, "pt") as original,
            safe_open(with_weights.root / name, "pt") as mirrored,
        ):
            for key in original.keys():  # noqa: SIM118 (safe_open has no __iter__)
                tensor = original.get_tensor(key)
                if tensor.is_floating_point() and not key.endswith("position_ids"):
                    assert mirrored.get_tensor(key).equal(tensor), key


def test_a_second_run_reuses_the_cache_and_a_changed_object_is_fetched_again(
    s3_env: Path, endpoint: str
) -> None:
    first = mirror_run("s3://runs/lr_jump/")
    again = mirror_run("s3://runs/lr_jump/")
    assert first.stats.fetched_bytes > 0 and again.stats.fetched_bytes == 0
    assert again.stats.reused_files == first.stats.whole_files + first.stats.ranged_files

    client = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
    key = "lr_jump/manifest.json"
    original = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    try:
        client.put_object(Bucket=BUCKET, Key=key, Body=original + b"\n")
        _clear_s3fs_instances()  # s3fs caches listings per instance
        changed = mirror_run("s3://runs/lr_jump/")
        assert changed.stats.fetched_bytes == len(original) + 1
        assert (changed.root / "manifest.json").read_bytes() == original + b"\n"
    finally:
        client.put_object(Bucket=BUCKET, Key=key, Body=original)


@pytest.mark.parametrize(
    "name",
    ["../escape", "a/../../b", "/etc/passwd", "a//b", "a/./b", "x\x1b[2Jy", "a\\b", "n" * 256],
)
def test_names_that_cannot_be_mirrored_safely_are_refused(name: str) -> None:
    parts, problem = safe_relative_parts(name)
    assert parts == () and problem is not None


def test_missing_credentials_is_one_clear_error(
    s3_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _clear_s3fs_instances()
    with pytest.raises(RemoteUnavailable, match=r"no valid credentials.*AWS_ACCESS_KEY_ID"):
        analyze("s3://runs/lr_jump/")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_endpoint_exits_2_with_one_line(s3_env: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_MAX_ATTEMPTS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-m", "tscope", "analyze", "s3://runs/lr_jump/", "--out",
         str(tmp_path / "out"), "--quiet"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tscope: error: Cannot reach s3://runs/lr_jump/")


def test_a_missing_bucket_is_one_clear_error(s3_env: Path) -> None:
    with pytest.raises(TscopeError, match="no such bucket or path"):
        analyze("s3://no-such-bucket/run/")
