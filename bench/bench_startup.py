"""Benchmark: startup of a logs-only `tscope analyze` (issue 15), against `python -c pass`.

    python bench/bench_startup.py              # 7 interleaved repetitions
    python bench/bench_startup.py --repeats 15

Writes a 3-row CSV in a temporary directory and times, in fresh child processes and alternating
so both sides see the same load: `python -c pass` (the interpreter alone), `import numpy` (the
floor of a numpy program), `import pandas` (what the metric table cost while it was a DataFrame),
the libraries a logs-only analyze still imports (pyarrow.csv, typer with pydantic, jinja2),
`import tscope.cli`, every module the analyze imports (recorded from one analyze, imported in its
order: the fixed startup) and the whole `tscope analyze` of the CSV. Byte-code is
cached in a temporary PYTHONPYCACHEPREFIX (warmed by one run first), as an installed package
would have it; with PYTHONDONTWRITEBYTECODE set every run recompiles tscope's sources instead.
"analyze, templates compiled" is the same analyze with TSCOPE_TEMPLATE_CACHE=0 (no user template
cache, as before render/template_cache.py). Prints the best and median of each, the margin over
the interpreter, the ratios to `python -c pass` and `import numpy` of the same run, and the
analyze split into the fixed startup and the rest. Numbers only: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(command: list[str], environment: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=environment, check=True, capture_output=True)
    return time.perf_counter() - start


# Every module the analyze ends up holding, imported in the order it imported them: the fixed
# cost of the analyze (interpreter + imports), apart from its reading, analysis and writing.
_LIST_MODULES = """
import json, sys
import tscope.cli
sys.argv = ["tscope", "analyze", sys.argv[1], "--out", sys.argv[2], "-q"]
try:
    tscope.cli.main()
except SystemExit:
    pass
print(json.dumps(list(sys.modules)))
"""
_IMPORT_ALL = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""


def _modules_of_an_analyze(python: str, csv: Path, root: Path, environment: dict[str, str]) -> str:
    listed = subprocess.run(
        [python, "-c", _LIST_MODULES, str(csv), str(root / "listed")],
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    )
    return listed.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        csv = root / "metrics.csv"
        csv.write_text("step,loss\n1,2.0\n2,1.9\n3,1.8\n")
        environment = dict(os.environ, PYTHONPYCACHEPREFIX=str(root / "pycache"))
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        python = sys.executable
        subjects = {
            "python -c pass": [python, "-c", "pass"],
            "import numpy": [python, "-c", "import numpy"],
            "import pandas": [python, "-c", "import pandas"],
            # What a logs-only analyze would still import without pandas: the CSV parser, the
            # CLI (typer 0.2x builds a pydantic TypeAdapter per option) and the templates.
            "import the rest": [python, "-c", "import numpy, pyarrow.csv, typer, pydantic, jinja2"],
            "import tscope.cli": [python, "-c", "import tscope.cli"],
            "import what analyze imports": [
                python,
                "-c",
                _IMPORT_ALL,
                _modules_of_an_analyze(python, csv, root, environment),
            ],
            "tscope analyze 3-row CSV": [
                python,
                "-m",
                "tscope",
                "analyze",
                str(csv),
                "--out",
                str(root / "out"),
                "-q",
            ],
        }
        # The same analyze compiling its templates in the process (no user template cache), as
        # before render/template_cache.py: the difference is what the cache saves.
        no_template_cache = dict(environment, TSCOPE_TEMPLATE_CACHE="0")
        subjects["analyze, templates compiled"] = subjects["tscope analyze 3-row CSV"]
        environments = {name: environment for name in subjects}
        environments["analyze, templates compiled"] = no_template_cache
        for name, command in subjects.items():
            timed(command, environments[name])  # warm the byte-code, template and page caches
        times: dict[str, list[float]] = {name: [] for name in subjects}
        for _ in range(arguments.repeats):
            for name, command in subjects.items():
                times[name].append(timed(command, environments[name]))
    interpreter = min(times["python -c pass"])
    numpy_import = min(times["import numpy"])
    print(
        f"{'subject':<30}{'best s':>8}{'median s':>10}{'best - pass':>13}"
        f"{'/ pass':>8}{'/ numpy':>9}"
    )
    for name, seconds in times.items():
        best = min(seconds)
        print(
            f"{name:<30}{best:>8.3f}{statistics.median(seconds):>10.3f}{best - interpreter:>13.3f}"
            f"{best / interpreter:>8.2f}{best / numpy_import:>9.2f}"
        )
    analyze = min(times["tscope analyze 3-row CSV"])
    fixed = min(times["import what analyze imports"])
    print(
        f"logs-only analyze: {analyze:.3f} s = {analyze / interpreter:.2f}x `python -c pass`, "
        f"{analyze / numpy_import:.2f}x `import numpy`; fixed startup (interpreter + every "
        f"module it imports) {fixed:.3f} s, the work (reading, analysis, writing the case) "
        f"{analyze - fixed:.3f} s"
    )
    load = os.getloadavg()[0]
    print(f"goal: analyze best < 1 s; {arguments.repeats} interleaved repetitions; load {load:.1f}")


if __name__ == "__main__":
    main()
