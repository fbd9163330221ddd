"""`tscope demo`: train a tiny GPT on CPU with a planted learning-rate jump and keep its run dir.

    from pathlib import Path
    from tscope.demo.train import make_demo_run
    demo = make_demo_run(Path("demo-run"))   # ~20 s on 2 CPU cores
    print(demo.run_dir, demo.planted_step)

Nothing here imports torch at package import time: the CLI imports `tscope.demo` lazily and the
submodules (`tiny_gpt`, `corpus`, `train`) pull torch in only when used.
"""

from __future__ import annotations
