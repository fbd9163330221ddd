"""Dask vs Ray for `tscope cluster` on a local 2-worker cluster, against the local process pool.

    .venv/bin/python bench/bench_cluster_engines.py              # 24 runs x 10,000 steps
    .venv/bin/python bench/bench_cluster_engines.py --runs 48

Measured in one run, interleaved so all see the same load: the local pool (the default), Dask
(`distributed.LocalCluster`, 2 single-threaded worker processes) and Ray (`ray.init(num_cpus=2)`),
each running the same `profile_task` per run as `tscope cluster` does. Reported: the engine's
start (cluster up, first trivial task back) and stop, the sweep on it, and the overhead over the
local pool; and whether the profiles (hence cluster.json) are the same. Ray is measured here only:
the product's engine is the one this bench chose (tscope/cluster_engines.py). Nothing asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_cluster import write_runs

from tscope.analyzers.cluster import cluster_runs
from tscope.cluster_pipeline import (
    RunOutcome,
    RunTask,
    _crashed,
    _pool_context,
    profile_task,
)
from tscope.cluster_workers import run_in_workers
from tscope.render.json_file import case_json_text, normalized_payload

WORKERS = 2


def _noop(value: int) -> int:
    return value


def on_local(tasks: list[RunTask]) -> tuple[float, list[RunOutcome], float]:
    start = time.perf_counter()
    outcomes = [o for _, o in run_in_workers(tasks, profile_task, _crashed, 2, _pool_context())]
    return 0.0, outcomes, time.perf_counter() - start


def on_dask(tasks: list[RunTask]) -> tuple[float, list[RunOutcome], float]:
    from distributed import Client, LocalCluster

    start = time.perf_counter()
    local = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=40,
    )
    client = Client(local)
    client.submit(_noop, 1).result()
    started = time.perf_counter() - start
    sweep_start = time.perf_counter()
    outcomes = client.gather(client.map(profile_task, tasks, pure=False))
    sweep = time.perf_counter() - sweep_start
    client.close()
    local.close()
    return started, outcomes, sweep


def on_ray(tasks: list[RunTask]) -> tuple[float, list[RunOutcome], float]:
    import ray

    start = time.perf_counter()
    # Ray's workers import tscope afresh: from this checkout, as the driver does.
    checkout = str(Path(__file__).resolve().parents[1])
    ray.init(
        num_cpus=WORKERS,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": checkout}},
    )
    remote_noop = ray.remote(_noop)
    ray.get(remote_noop.remote(1))
    started = time.perf_counter() - start
    remote_task = ray.remote(profile_task)
    sweep_start = time.perf_counter()
    outcomes = ray.get([remote_task.remote(task) for task in tasks])
    sweep = time.perf_counter() - sweep_start
    ray.shutdown()
    return started, outcomes, sweep


def report_text(outcomes: list[RunOutcome], runs: Path) -> str:
    report = cluster_runs([o.profile for o in outcomes if o.profile is not None], str(runs))
    return case_json_text(normalized_payload(report.to_dict()))


def install_size(package: str) -> str:
    from importlib import metadata

    try:
        files = metadata.files(package) or []
    except metadata.PackageNotFoundError:
        return "not installed"
    total = sum(
        Path(str(f.locate())).stat().st_size for f in files if Path(str(f.locate())).is_file()
    )
    return f"{total / 1e6:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args()
    engines: dict[str, Callable[[list[RunTask]], tuple[float, list[RunOutcome], float]]] = {
        "local pool": on_local,
        "dask": on_dask,
        "ray": on_ray,
    }
    # Ray is not a dependency of any extra (the bench chose Dask); measured only where installed.
    for name, module in (("dask", "distributed"), ("ray", "ray")):
        if importlib.util.find_spec(module) is None:
            print(f"{name}: not installed (pip install {module}), not measured")
            del engines[name]
    work = Path(tempfile.mkdtemp(prefix="tscope-bench-engines-"))
    try:
        runs = work / "runs"
        write_runs(runs, arguments.runs)
        timings: dict[str, list[tuple[float, float, float]]] = {name: [] for name in engines}
        texts: dict[str, str] = {}
        for round_index in range(arguments.rounds):
            for name, engine in engines.items():
                # A fresh output folder per call: every run is analyzed (no cached case).
                out = work / f"out-{name.replace(' ', '_')}-{round_index}"
                tasks = [
                    RunTask(run.name, str(run), str(out / run.name), True, False)
                    for run in sorted(runs.iterdir())
                ]
                out.mkdir()
                whole = time.perf_counter()
                started, outcomes, sweep = engine(tasks)
                timings[name].append((started, sweep, time.perf_counter() - whole))
                texts[name] = report_text(outcomes, runs)
        local = statistics.median(t[2] for t in timings["local pool"])
        print(f"{arguments.runs} runs x 10,000 steps, {WORKERS} workers, {arguments.rounds} rounds")
        print(f"{'engine':<12}{'start s':>9}{'sweep s':>9}{'total s':>9}{'overhead s':>12}")
        for name, rows in timings.items():
            total = statistics.median(r[2] for r in rows)
            print(
                f"{name:<12}{statistics.median(r[0] for r in rows):>9.2f}"
                f"{statistics.median(r[1] for r in rows):>9.2f}{total:>9.2f}{total - local:>12.2f}"
            )
        for name in [engine for engine in ("dask", "ray") if engine in engines]:
            same = texts[name] == texts["local pool"]
            print(
                f"{name}: cluster.json {'identical to' if same else 'DIFFERS from'} the local pool's"
            )
        print(
            f"installed size: distributed {install_size('distributed')} + dask "
            f"{install_size('dask')}; ray {install_size('ray')}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
