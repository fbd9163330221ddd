"""A trainscope recording (PyPI `trainscope`, its live recorder's run directory).

The recorder writes, per run folder (read from trainscope 1.8.1's `io/writer.py`):

- `meta.json` (`model_name`, `model_config`, `trainscope_config`, `detector`), `manifest.json`;
- `global.arrow`: one row per recorded step — `step` (the recorder's own counter, from 0),
  `loss`, `grad_norm_before_clip`, `grad_norm_after_clip`, `lr` (param group 0),
  `optimizer_v_norm`, `is_spike`, `spike_score`, memory and timing;
- `layers/<quoted param name>.arrow`: per parameter and step `grad_l2_norm`, `weight_l2_norm`,
  `act_max_abs`, `act_kurtosis` (activations only every `activation_metrics_every_n_steps`, null
  otherwise), `grad_nan_inf_ratio`, histograms, …;
- `moe.arrow`: `step`, `block`, `shares` (the fraction of tokens each expert received);
- `spikes/spike_step_N.arrow` (+ `_layers/`): the window around each step its detector flagged;
- `rng_states/step_N.pkl` (pickles: never opened here) and optional `checkpoints/N.pt` (read by
  the checkpoint readers, which decode pickles at the opcode level).

Arrow files are IPC streams appended live (a crash may cut the last message) or IPC files from
older versions; both are read, a cut tail is dropped and listed as partial. One reader claims
`global.arrow` and reads the recording's other files itself, so the recording is one run.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.base import inside_input, read_head
from tscope.ingest.readers.arrow_ipc import ARROW_FILE_MAGIC, ARROW_STREAM_CONTINUATION
from tscope.ingest.readers.arrow_ipc import read_arrow as read_arrow_columns
from tscope.ingest.safe_fs import is_regular_file
from tscope.model import Caveat, LogRead, MetricTable, PartialInput, RunEvent
from tscope.model.layer_metrics import (
    ACT_KURTOSIS,
    ACT_MAX,
    GRAD_MAX,
    GRAD_NORM,
    WEIGHT_NORM,
    layer_metric_name,
)
from tscope.model.metric_names import GRAD_NORM as TRAIN_GRAD_NORM
from tscope.model.metric_names import LEARNING_RATE, LOSS

if TYPE_CHECKING:
    import pandas as pd

# A recorder row is ~100 bytes per step in global.arrow and ~200 per parameter and step in a
# layer file; these bounds hold a 10M-step global file and a 1M-step layer file.
MAX_GLOBAL_BYTES = 1024 * 1024 * 1024
MAX_LAYER_BYTES = 256 * 1024 * 1024
MAX_META_BYTES = 4 * 1024 * 1024
# A model with more parameter tensors than this is read for its first ones only (partial).
MAX_LAYER_FILES = 4096
# Expert-share series read from moe.arrow, all blocks together: Mixtral's 32 blocks of 8 experts
# are read whole, a DeepSeek-V3 recording (58 x 256) in part; each series costs the analysis time.
MAX_MOE_SERIES = 8192

_GLOBAL_SERIES = {
    "loss": LOSS,
    "grad_norm_before_clip": TRAIN_GRAD_NORM,
    "grad_norm_after_clip": "train/grad_norm_after_clip",
    "lr": LEARNING_RATE,
    "optimizer_v_norm": "train/optimizer_v_norm",
    "spike_score": "trainscope/spike_score",
}
_LAYER_SERIES = {
    "grad_l2_norm": GRAD_NORM,
    "weight_l2_norm": WEIGHT_NORM,
    "act_max_abs": ACT_MAX,
    "act_kurtosis": ACT_KURTOSIS,
    "grad_max_abs": GRAD_MAX,
}
_SPIKE_FILE = re.compile(r"^spike_step_(\d+)\.arrow$")
_META_KEYS = ("model_name", "start_time")


class TrainscopeRunReader:
    name = "trainscope"

    def can_read(self, path: Path) -> bool:
        if path.name != "global.arrow":
            return False
        folder = path.parent
        if not inside_input(folder / "meta.json"):
            # A global.arrow named alone: its meta.json and layer files are outside the input,
            # and without them the file is not known to be a trainscope recording.
            return False
        if not (is_regular_file(folder / "meta.json") or is_regular_file(folder / "manifest.json")):
            return False
        head = read_head(path, 8)
        return head.startswith(ARROW_FILE_MAGIC) or head.startswith(ARROW_STREAM_CONTINUATION)

    def read(self, path: Path, display_path: str) -> LogRead:
        folder = path.parent
        shown_folder = display_path.rpartition("/")[0]
        partial: list[PartialInput] = []
        table, problem = read_arrow(path, display_path, MAX_GLOBAL_BYTES)
        if table is None:
            raise UnreadableInput(display_path, problem or "no rows", "Re-record or copy it again")
        if problem:
            partial.append(PartialInput(display_path, problem))
        if "step" not in table.columns:
            raise UnreadableInput(display_path, "no step column in global.arrow")
        frames = _global_frames(table, display_path)
        events = _recorder_spikes(table, display_path)
        frames.extend(_layer_frames(folder, shown_folder, partial))
        frames.extend(_moe_frames(folder, shown_folder, partial))
        events.extend(_spike_windows(folder, shown_folder, {e.step for e in events}))
        config = _meta_config(folder, shown_folder, partial)
        caveats = _caveats(folder, shown_folder, config)
        import pandas as pd  # here: a run without a recorder folder needs no pandas

        metrics = pd.concat(frames, ignore_index=True) if frames else None
        read = LogRead(
            kind=self.name,
            path=display_path,
            events=events,
            caveats=caveats,
            config=config,
            partial=partial,
        )
        if metrics is not None and not metrics.empty:
            metrics["order"] = np.arange(len(metrics), dtype=np.int64)
            read.metrics = MetricTable.from_frame(metrics)
        return read


_WANTED_COLUMNS = {"step", "is_spike", "block", "shares", *_GLOBAL_SERIES, *_LAYER_SERIES}


def read_arrow(path: Path, display_path: str, limit: int) -> tuple[pd.DataFrame | None, str]:
    """The recorder's columns of an Arrow IPC file or stream (arrow_ipc.py checks what a
    stranger's Arrow file declares before pyarrow and pandas expand it)."""
    return read_arrow_columns(path, display_path, limit, _WANTED_COLUMNS)


def _long(
    steps: np.ndarray, values: np.ndarray, metric: str, original: str, source: str
) -> pd.DataFrame:
    import pandas as pd

    keep = ~pd.isna(values)
    return pd.DataFrame(
        {
            "step": steps[keep].astype(np.int64),
            "metric": metric,
            "value": values[keep].astype(np.float64),
            "source": source,
            "original_name": original,
            "order": 0,
        }
    )


def _numeric(table: pd.DataFrame, column: str) -> np.ndarray:
    import pandas as pd

    return pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=np.float64)


def _global_frames(table: pd.DataFrame, source: str) -> list[pd.DataFrame]:
    steps = _numeric(table, "step")
    valid = np.isfinite(steps) & (steps >= 0)
    frames = []
    for column, metric in _GLOBAL_SERIES.items():
        if column in table.columns:
            values = _numeric(table, column)
            frames.append(_long(steps[valid], values[valid], metric, column, source))
    return frames


def _recorder_spikes(table: pd.DataFrame, source: str) -> list[RunEvent]:
    if "is_spike" not in table.columns:
        return []
    flagged = table[table["is_spike"].fillna(False).astype(bool)]
    events = []
    for _, row in flagged.iterrows():
        score = float(row["spike_score"]) if "spike_score" in flagged.columns else float("nan")
        step = int(row["step"])
        events.append(
            RunEvent(
                kind="recorder_spike",
                step=step,
                detail=f"trainscope's detector flagged step {step} (spike_score {score:.3g})",
                source=source,
                numbers={"spike_score": score},
            )
        )
    return events


def _regular_entries(folder: Path) -> list[Path]:
    """Regular files directly in `folder`, by name. Links and other entries are skipped here;
    discovery walks the same folder and lists each of them as partial."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    with os.scandir(folder) as listing:
        entries = sorted(listing, key=lambda item: item.name)
    return [
        Path(e.path) for e in entries if not e.is_symlink() and e.is_file(follow_symlinks=False)
    ]


def _join(shown_folder: str, *parts: str) -> str:
    return "/".join(part for part in (shown_folder, *parts) if part)


def _layer_frames(folder: Path, shown: str, partial: list[PartialInput]) -> list[pd.DataFrame]:
    layers_shown = _join(shown, "layers")
    files = [p for p in _regular_entries(folder / "layers") if p.suffix == ".arrow"]
    if len(files) > MAX_LAYER_FILES:
        partial.append(
            PartialInput(
                layers_shown,
                f"{len(files)} layer files; the first {MAX_LAYER_FILES} by name were read",
            )
        )
        files = files[:MAX_LAYER_FILES]
    frames = []
    for file in files:
        file_shown = _join(layers_shown, file.name)
        try:
            table, problem = read_arrow(file, file_shown, MAX_LAYER_BYTES)
        except UnreadableInput as error:
            partial.append(PartialInput(error.path, error.problem))
            continue
        if problem:
            partial.append(PartialInput(file_shown, problem))
        if table is None or "step" not in table.columns:
            continue
        layer = urllib.parse.unquote(file.stem)
        steps = _numeric(table, "step")
        valid = np.isfinite(steps) & (steps >= 0)
        for column, stat in _LAYER_SERIES.items():
            if column in table.columns:
                values = _numeric(table, column)[valid]
                name = layer_metric_name(layer, stat)
                frames.append(_long(steps[valid], values, name, column, file_shown))
    return frames


def _moe_frames(folder: Path, shown: str, partial: list[PartialInput]) -> list[pd.DataFrame]:
    path = folder / "moe.arrow"
    file_shown = _join(shown, "moe.arrow")
    if not is_regular_file(path):
        return []
    try:
        table, problem = read_arrow(path, file_shown, MAX_GLOBAL_BYTES)
    except UnreadableInput as error:
        partial.append(PartialInput(error.path, error.problem))
        return []
    if problem:
        partial.append(PartialInput(file_shown, problem))
    if table is None or not {"step", "block", "shares"} <= set(table.columns):
        return []
    frames = []
    series_left = MAX_MOE_SERIES
    for block, rows in table.groupby("block", sort=True):
        if series_left <= 0:
            break
        shares = [np.asarray(s if s is not None else [], dtype=np.float64) for s in rows["shares"]]
        widths = {len(s) for s in shares}
        steps = _numeric(rows, "step")
        if len(widths) != 1 or min(widths) < 2:
            partial.append(PartialInput(file_shown, f"block {block!r}: uneven expert counts"))
            continue
        matrix = np.vstack(shares)
        experts = min(matrix.shape[1], series_left)
        if experts < matrix.shape[1]:
            # One series per block and expert: 200 blocks of 100,000 "experts" (a few KB of
            # zstd) made 20 million series and never finished.
            partial.append(
                PartialInput(
                    file_shown,
                    f"{MAX_MOE_SERIES} expert series read (tscope's cap per recording): block "
                    f"{block!r} read in part ({experts} of {matrix.shape[1]} experts), any "
                    "block after it not at all",
                )
            )
        series_left -= experts
        for expert in range(experts):
            name = f"moe/{block}/expert_{expert}_share"
            frames.append(_long(steps, matrix[:, expert], name, "shares", file_shown))
    return frames


def _spike_windows(folder: Path, shown: str, known: set[int]) -> list[RunEvent]:
    """Spike windows for steps global.arrow did not flag (a recording cut before its flush)."""
    spikes_shown = _join(shown, "spikes")
    events = []
    for file in _regular_entries(folder / "spikes"):
        match = _SPIKE_FILE.match(file.name)
        if match and int(match.group(1)) not in known:
            step = int(match.group(1))
            events.append(
                RunEvent(
                    "recorder_spike",
                    step,
                    f"trainscope saved a spike window at step {step}",
                    _join(spikes_shown, file.name),
                )
            )
    return events


def _meta_config(folder: Path, shown: str, partial: list[PartialInput]) -> dict[str, Any]:
    path = folder / "meta.json"
    if not is_regular_file(path):
        return {}
    file_shown = _join(shown, "meta.json")
    try:
        # Nesting bounded, integers int64-safe: 100,000 levels once ended in a RecursionError
        # traceback, and a 4,000-digit integer reached case.json, which `tscope report` refuses.
        meta = safe_json.load_file(path, file_shown, MAX_META_BYTES)
    except UnreadableInput as error:
        partial.append(PartialInput(error.path, error.problem_text))
        return {}
    if not isinstance(meta, dict):
        return {}
    config: dict[str, Any] = {
        f"trainscope.{k}": meta[k] for k in _META_KEYS if isinstance(meta.get(k), str)
    }
    detector = meta.get("detector")
    if isinstance(detector, dict) and isinstance(detector.get("name"), str):
        config["trainscope.detector"] = detector["name"]
    settings = meta.get("trainscope_config")
    if isinstance(settings, dict):
        for key in ("trace_every_n_steps", "activation_metrics_every_n_steps"):
            if isinstance(settings.get(key), int):
                config[f"trainscope.{key}"] = settings[key]
    return config


def _caveats(folder: Path, shown: str, config: dict[str, Any]) -> list[Caveat]:
    source = _join(shown, "global.arrow")
    caveats = [
        Caveat(
            "recorder_steps",
            "Steps are trainscope's own counter (its k-th step() call, from 0); the gradient norm "
            "is the one it measured at step(), after any clipping the loop did before it.",
            source,
        )
    ]
    every = config.get("trainscope.activation_metrics_every_n_steps")
    if isinstance(every, int) and every > 1:
        caveats.append(
            Caveat(
                "recorder_sampling",
                f"Activation statistics were recorded every {every} steps.",
                source,
            )
        )
    pickles = [p for p in _regular_entries(folder / "rng_states") if p.suffix == ".pkl"]
    if pickles:
        caveats.append(
            Caveat(
                "pickles_not_read",
                f"{len(pickles)} RNG state file(s) in rng_states/ are pickles and were not opened.",
                _join(shown, "rng_states"),
            )
        )
    return caveats
