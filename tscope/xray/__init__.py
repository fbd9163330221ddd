"""`tscope xray`'s library: the token audit (per-token gradient weights, cross-sequence leaks).

The folder follows the data flow: `tracer` builds the tiny Llama every probe token has its own
row in, `probe` makes the batch, `weighting` and `leak` measure, `entry` loads the user's step,
`trainer_step` runs a Hugging Face Trainer's own step, `api` ties them together.
torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

from tscope.xray.api import LEAK_RELATIVE_THRESHOLD, xray_entry

__all__ = ["LEAK_RELATIVE_THRESHOLD", "xray_entry"]
