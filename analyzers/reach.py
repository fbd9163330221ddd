"""How far a cause reaches: the windows in which a cause is linked to the incident it explains.

One module that the explainers (spikes, learning_rate) and the ranking and cause competition all
import, so that each window is written once (the explainers cannot import the ranking: it
imports them).
"""

from __future__ import annotations

# A cause is credited to an incident when it lies at most this many steps before the onset (the
# story gives the exact lead; an LR jump or a bad resume acts within a few optimizer steps).
CAUSE_LOOKBACK_STEPS = 100
# A bad batch acts at its own step only: the loss is back on its trend one logged point later
# (explainers/bad_batch_logs.py bounds the point after). In the cause competition it can explain
# an incident that starts at its step or one step after, never one that starts 50 steps on, as an
# LR change or a resume can (holdout3's trainer_llama-resume_scheduler_lost-60: an unplanted
# one-step break at 75 won the card for a gradient-norm incident at 127 over the resume at 101;
# with this bound the four spent splits, 358 runs, keep every headline and alert).
ONE_STEP_CAUSE_LOOKBACK = {"bad_batch": 1}
# A loss incident whose onset falls within this many logged points after an LR event is linked
# to it (the story reports the exact lead).
LR_EFFECT_WINDOW_POINTS = 20
