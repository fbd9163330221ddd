"""A loss that rises while a logged weight of one of its terms ramps up is the objective
changing, not the model breaking (analyzers/loss_weights.py). Healthy-run hunt, session 26: a
β-VAE with KL annealing (Lightning + TensorBoard) logged train/beta 0 → 1 while its total loss
rose 1.8 → 4.2; it was a critical divergence and a loss-spike warning."""

from __future__ import annotations

import numpy as np
from synthetic import make_run

from tscope.analyzers import Evidence, explain
from tscope.model.metric_names import LOSS

STEPS = 600


def _vae(with_beta: bool, blow_up: bool = False):
    rng = np.random.default_rng(4)
    step = np.arange(STEPS)
    beta = np.clip(step / 300, 0.0, 1.0)
    kl = 0.1 + 4.5 * (1 - np.exp(-step / 15)) * np.exp(-step / 400) + 2.0
    recon = 1.0 + 7.5 * np.exp(-step / 10) + 0.5 * beta + 0.1 * rng.standard_normal(STEPS)
    loss = recon + beta * kl
    if blow_up:
        loss[450:] *= 6  # the model breaking while the weight still ramps: not annealing
    series = {LOSS: loss, "train/kl": kl, "train/recon": recon}
    if with_beta:
        series["train/beta"] = np.clip(step / 500, 0.0, 1.0)
    return make_run(series)


def _alerts(run) -> list[tuple[str, str]]:
    from tscope.analyzers.detect import detect

    spikes, changes = detect(run)
    findings = explain(Evidence(run, spikes, changes))
    return [(f.category, f.severity) for f in findings if f.severity in ("warning", "critical")]


def test_a_loss_rising_with_its_logged_term_weight_is_not_an_alert():
    assert _alerts(_vae(with_beta=True)) == []


def test_the_same_rise_without_the_weight_logged_is_a_divergence():
    assert ("loss_divergence", "critical") in _alerts(_vae(with_beta=False))


def test_a_blow_up_far_beyond_what_a_reweighted_term_gives_stays_critical():
    assert ("loss_divergence", "critical") in _alerts(_vae(with_beta=True, blow_up=True))
