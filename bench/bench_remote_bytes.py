"""Benchmark: bytes transferred from an S3 store by `tscope analyze s3://…` against the run's size.

    python bench/bench_remote_bytes.py                          # the committed lr_jump Trainer run
    python bench/bench_remote_bytes.py --run PATH --shard-mib 256

Starts moto's S3 server on a free local port (a real HTTP endpoint, `pip install 'moto[server]'`),
uploads the run folder (plus, with --shard-mib, a text dataset shard beside it, as runs often
keep one), then mirrors it into a fresh cache three ways and prints what each transferred
(counted by tscope's fetcher: the bytes of every range response) against the listed sizes:

* logs only (`--no-weights`): safetensors headers, every other checkpoint and log file whole;
* statistics scan (the default analysis): plus the tensor ranges the statistics read;
* again: the same URL a second time, from the cache.

Numbers only; tests/test_remote.py asserts the exact byte accounting on the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer" / "lr_jump"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=RUN)
    parser.add_argument("--shard-mib", type=int, default=16, help="dataset shard beside the run")
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    client = boto3.client("s3")
    client.create_bucket(Bucket="bench")
    for file in sorted(args.run.rglob("*")):
        if file.is_file():
            client.upload_file(str(file), "bench", f"run/{file.relative_to(args.run).as_posix()}")
    if args.shard_mib:
        line = b'{"text": "the quick brown fox jumps over the lazy dog"}\n'
        shard = line * (args.shard_mib * 1024 * 1024 // len(line))
        client.put_object(Bucket="bench", Key="run/data/train.jsonl", Body=shard)

    from tscope.ingest.remote_mirror import mirror_run

    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch)
        rows = []
        for label, weights, folder in (
            ("logs only (--no-weights)", False, "a"),
            ("statistics scan", True, "b"),
            ("statistics scan, again", True, "b"),
        ):
            start = time.perf_counter()
            mirror = mirror_run("s3://bench/run/", read_weights=weights, cache_dir=cache / folder)
            rows.append((label, mirror.stats, time.perf_counter() - start))
    server.stop()
    listed = rows[0][1].listed_bytes
    print(
        f"run: {args.run} + {args.shard_mib} MiB shard; listed {rows[0][1].listed_files} files, {listed:,} bytes"
    )
    print(
        f"{'mode':28} {'fetched bytes':>14} {'of listed':>9} {'requests':>8} {'ranged':>6} {'left out':>8} {'reused':>6} {'s':>6}"
    )
    for label, stats, seconds in rows:
        share = stats.fetched_bytes / listed if listed else 0.0
        print(
            f"{label:28} {stats.fetched_bytes:>14,} {share:>9.1%} {stats.requests:>8} "
            f"{stats.ranged_files:>6} {stats.left_out_files:>8} {stats.reused_files:>6} {seconds:>6.2f}"
        )


if __name__ == "__main__":
    main()
