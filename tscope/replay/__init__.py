"""`tscope replay`'s library: re-run the optimizer steps around a step from the newest checkpoint
before it, and check that they reproduce the logged run.

    from tscope.replay import replay
    result = replay("runs/exp1", around=145, entry="replay_entry.py")

The folder follows the data flow: `select` picks the checkpoint, `files` reads it safely,
`model_build` / `optimizer_build` / `rng` / `lr_source` / `normaliser` restore the state
(`restore` orders them), `determinism` fixes the kernels, `loop` replays the steps with
`observers` as extension points, `fidelity` compares with the log, `api` ties them together.
torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

from tscope.replay.api import DEFAULT_WINDOW, replay
from tscope.replay.observers import Intervention, StepContext, StepObserver

__all__ = ["DEFAULT_WINDOW", "Intervention", "StepContext", "StepObserver", "replay"]
