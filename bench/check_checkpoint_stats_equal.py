"""Check: the torch-free scan gives the torch path's statistics on real checkpoints (issue 15).

    python bench/check_checkpoint_stats_equal.py fixtures/data          # the repository's fixtures
    python bench/check_checkpoint_stats_equal.py --dev-bench            # the accuracy bench's dev runs

For every *.safetensors file under the folders (links not followed): each tensor's statistics
from tscope.ingest.checkpoints.stats.safetensors_scan (compiled kernels, vector-lane sums,
threads) against tensor_stats over the tensor torch-free read_tensor loads (the torch path,
torch's own reductions). Prints the largest relative difference per statistic and whether every
log-histogram count is equal; exits 1 when a difference exceeds REL_TOLERANCE (the tolerance
the tests hold: float64 summation order) or a histogram differs. Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REL_TOLERANCE = 1e-9
ABS_TOLERANCE = 1e-12
FIELDS = ("l2_norm", "rms", "mean", "std", "min", "max", "max_abs", "zero_fraction",
          "excess_kurtosis")  # fmt: skip


def dev_bench_folders(cache: Path) -> list[Path]:
    """The accuracy bench's dev-split run folders (never the test or holdout splits)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from accuracy.spec import build_specs, select

    return [cache / f"{spec.name}-{spec.key}" for spec in select(build_specs(), "dev", ())]


def safetensors_files(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.rglob("*.safetensors")):
        if not path.is_symlink() and path.is_file():
            found.append(path)
    return found


def main() -> int:
    from tscope.ingest.checkpoints.safetensors_header import read_header, read_tensor
    from tscope.ingest.checkpoints.stats.safetensors_scan import scan_entries
    from tscope.ingest.checkpoints.stats.tensor import tensor_stats

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--dev-bench", action="store_true")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "tscope-bench")
    arguments = parser.parse_args()
    folders = list(arguments.folders)
    if arguments.dev_bench:
        folders += [f for f in dev_bench_folders(arguments.cache) if f.is_dir()]
    worst = dict.fromkeys(FIELDS, 0.0)
    files = tensors = histogram_mismatches = failures = 0
    for folder in folders:
        for path in safetensors_files(folder):
            files += 1
            shown = str(path)
            entries = read_header(path, shown).entries
            by_name = {e.name: e for e in entries}
            for name, scanned in scan_entries(path, shown, entries, workers=2):
                reference = tensor_stats(read_tensor(path, by_name[name], shown))
                tensors += 1
                for field in FIELDS:
                    got, want = getattr(scanned, field), getattr(reference, field)
                    if math.isnan(want) or math.isnan(got):
                        if math.isnan(want) != math.isnan(got):
                            failures += 1
                            print(f"NaN differs: {shown} {name} {field}: {got} vs {want}")
                        continue
                    difference = abs(got - want)
                    if want != 0:
                        worst[field] = max(worst[field], difference / abs(want))
                    if difference > ABS_TOLERANCE + REL_TOLERANCE * abs(want):
                        failures += 1
                        print(f"differs: {shown} {name} {field}: {got!r} vs {want!r}")
                if (scanned.log_histogram != reference.log_histogram).any():
                    histogram_mismatches += 1
                    print(f"histogram differs: {shown} {name}")
    print(f"{files} files, {tensors} tensors from {len(folders)} folders")
    print("largest relative difference per statistic (where the reference is not 0):")
    for field, value in worst.items():
        print(f"  {field:<16} {value:.2e}")
    print(
        f"log histograms differing: {histogram_mismatches}; beyond rel {REL_TOLERANCE}: {failures}"
    )
    return 1 if failures or histogram_mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
