"""Each run's case folder of a cluster report, OUT/runs/<run>/, as a cache: written once per run
(case.json, the full-resolution loss and LR in series.npz, the layers table, and inputs.json, the
fingerprint of the files it was built from, sealed with this user's key: cluster_cache_seal.py),
and read back by a later call when the run's files, the tscope version and the options are
unchanged. What came with the folder and was not written by this user's tscope is analyzed
again, never trusted."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tscope import __version__
from tscope.cluster_cache_seal import is_sealed, seal
from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.discover import iter_files
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model.case import Case
from tscope.model.cluster import LossCurve
from tscope.output_files import make_subfolder, prepare_folder, write_with
from tscope.output_writer import write_json, write_layers_parquet

if TYPE_CHECKING:
    from tscope.cluster_pipeline import RunTask

SERIES_FILE = "series.npz"
FINGERPRINT_FILE = "inputs.json"
# A cached case.json or inputs.json larger than this was not written by tscope: analyze again.
CACHE_MAX_BYTES = 256 * 1024 * 1024
# What tscope writes into each run's case folder (see output_files).
RUN_CASE_FILES = ("case.json", "case.html", "layers.parquet", SERIES_FILE, FINGERPRINT_FILE)
# The cached files a reused run is read from, sealed in the fingerprint file (cluster_cache_seal).
SEALED_FILES = ("case.json", SERIES_FILE)
SEAL_FIELD = "seal"


def analyze_and_store(
    task: RunTask, case_dir: Path, fingerprint: dict[str, Any]
) -> tuple[Case, LossCurve, float | None]:
    from tscope.analyzers.signals import loss_series, primary_loss
    from tscope.model.metric_names import LEARNING_RATE
    from tscope.pipeline import analyze_run

    case, run = analyze_run(
        task.path,
        trust_pickle=task.trust_pickle,
        read_weights=task.read_weights,
        resolved_paths=task.within is not None,
    )
    metric = primary_loss(run)
    steps, values = loss_series(run, metric) if metric else (np.empty(0, np.int64), np.empty(0))
    lr_steps, lrs = run.series(LEARNING_RATE)
    # A fresh folder for this run's case: an earlier case's layers.parquet must not stay beside it.
    make_subfolder(case_dir.parent, case_dir.name)
    prepare_folder(case_dir, f"the case of run {task.name}", RUN_CASE_FILES, clear=True)
    payload = case.to_dict()  # already JSON-safe: NaN as strings, floats rounded
    # Compact, sorted JSON: the C encoder (an indented dump is ~10x slower in pure Python, which
    # dominates a 1,000-run sweep). `tscope report` reads it; `--format json` rewrites it indented.
    write_json(case_dir / "case.json", payload, round_floats=False, compact=True)
    # numpy's own format, read back with allow_pickle=False: arrays only, nothing executes.
    write_with(
        case_dir / SERIES_FILE,
        lambda handle: np.savez(
            handle, loss_steps=steps, loss_values=values, lr_steps=lr_steps, lr_values=lrs
        ),
    )
    if case.layers_table is not None:
        write_layers_parquet(case.layers_table, case_dir / "layers.parquet")
    # Written last: its presence means the rest of the folder is complete. Sealed with this
    # user's key (cluster_cache_seal.py): a cache that came with the input is not reused.
    contents = [read_bytes_bounded(case_dir / name, name) for name in SEALED_FILES]
    sealed = {**fingerprint, SEAL_FIELD: seal(fingerprint, *contents)}
    write_json(case_dir / FINGERPRINT_FILE, sealed, round_floats=False, compact=True)
    # Read back from its payload, as a cached one is: the profile sees the same case either way.
    return Case.from_dict(payload), LossCurve(steps, values), _max_finite(lrs)


def load_cached(
    case_dir: Path, fingerprint: dict[str, Any]
) -> tuple[Case, LossCurve, float | None] | None:
    # Read back like any input (regular files only, no link followed): the cache sits in a
    # folder that may have been reused.
    if case_dir.is_symlink():
        return None
    try:
        # Bounded in size and nesting too: a crafted case.json here is analyzed again, not trusted.
        stored = safe_json.load_file(case_dir / FINGERPRINT_FILE, FINGERPRINT_FILE, CACHE_MAX_BYTES)
        if not isinstance(stored, dict):
            return None
        stored_seal = stored.pop(SEAL_FIELD, None)
        if stored != fingerprint:
            return None
        case_bytes, series_bytes = (
            read_bytes_bounded(case_dir / name, name, CACHE_MAX_BYTES) for name in SEALED_FILES
        )
        # Only what this user's tscope wrote is read further (a forged case, a deflated npz
        # that expands to gigabytes: analyzed again instead).
        if not is_sealed(fingerprint, stored_seal, case_bytes, series_bytes):
            return None
        payload = safe_json.loads(case_bytes, "case.json", refuse_huge_ints=True)
        if not isinstance(payload, dict):
            return None
        # Another schema version, or a field of the wrong type (CaseFormatError, a ValueError):
        # the cached case is not one this tscope reads, so the run is analyzed again.
        case = Case.from_dict(payload)
        with np.load(io.BytesIO(series_bytes), allow_pickle=False) as series:
            curve = LossCurve(
                series["loss_steps"].astype(np.int64), series["loss_values"].astype(np.float64)
            )
            lrs = series["lr_values"].astype(np.float64)
    except (OSError, ValueError, KeyError, UnreadableInput, MemoryError):
        return None  # missing or damaged cache: analyze again
    return case, curve, _max_finite(lrs)


def fingerprint_of(path: Path, task: RunTask) -> dict[str, Any]:
    """Every input file's size and modification time, plus what else decides the case."""
    files = []
    # The files discovery will read: regular files, no link inside the run followed.
    candidates = [path] if path.is_file() else list(iter_files(path))
    for file in candidates:
        try:
            stat = file.stat()
        except OSError:
            continue
        files.append(
            [
                str(file.relative_to(path)) if file != path else file.name,
                stat.st_size,
                stat.st_mtime_ns,
            ]
        )
    return {
        "tool_version": __version__,
        "read_weights": task.read_weights,
        "trust_pickle": task.trust_pickle,
        "run": task.run,
        "files": files,
    }


def _max_finite(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else None
