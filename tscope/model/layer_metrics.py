"""Per-layer metric names: tscope's own scheme and the ones users already log.

Readers that know a producer's per-layer statistics (the trainscope recorder) write them as
`layers/<layer>/<stat>`. Runs that logged per-layer series themselves (TensorBoard, W&B, CSV)
keep their own names in the table; `layer_metric` recognizes the common schemes, so the per-layer
analysis reads both the same way. The schemes, with where each comes from:

- `layers/<layer>/<stat>`                     tscope (the trainscope reader writes it)
- `grad_norm/<layer>`, `grad_norms/<layer>`   hand-written loops, Megatron-style `grad-norm/<layer>`
- `grad_<p>_norm/<layer>`                     Lightning `utilities.grad_norm` (`grad_2.0_norm/<name>`)
- `grad/<layer>.norm`, `param/<layer>.norm`   OLMo's optimizer metrics (`optim/grad/<name>.norm`)
- `gradients/<layer>/norm`, `<layer>/grad_norm`, `<layer>/grad`
- `weights/<layer>/norm`, `weight_norm/<layer>`, `param_norm/<layer>`, `<layer>/weight_norm`
- `activations/<layer>/max`, `act_max/<layer>`, `activations/<layer>/kurtosis`

A leading `train/` or `optim/` is ignored, dashes and spaces count as underscores, and names are
compared in lower case (the layer keeps its spelling).
"""

from __future__ import annotations

import re
from typing import NamedTuple

GRAD_NORM = "grad_norm"
WEIGHT_NORM = "weight_norm"
ACT_MAX = "act_max"
ACT_KURTOSIS = "act_kurtosis"
GRAD_MAX = "grad_max"
LAYER_STATS = (GRAD_NORM, WEIGHT_NORM, ACT_MAX, ACT_KURTOSIS, GRAD_MAX)
# What each statistic is called in a sentence.
STAT_WORDS = {
    GRAD_NORM: "gradient norm",
    WEIGHT_NORM: "weight norm",
    ACT_MAX: "max |activation|",
    ACT_KURTOSIS: "activation kurtosis",
    GRAD_MAX: "max |gradient|",
}
LAYER_PREFIX = "layers/"


class LayerMetric(NamedTuple):
    layer: str
    stat: str


def layer_metric_name(layer: str, stat: str) -> str:
    """tscope's own name for a per-layer series."""
    return f"{LAYER_PREFIX}{layer}/{stat}"


_PREFIX_STATS = {
    "grad_norm": GRAD_NORM,
    "grad_norms": GRAD_NORM,
    "gradient_norm": GRAD_NORM,
    "weight_norm": WEIGHT_NORM,
    "weight_norms": WEIGHT_NORM,
    "param_norm": WEIGHT_NORM,
    "params_norm": WEIGHT_NORM,
    "parameter_norm": WEIGHT_NORM,
    "act_max": ACT_MAX,
    "activation_max": ACT_MAX,
    "act_kurtosis": ACT_KURTOSIS,
}
# `<group>/<layer>/<stat>`: group and stat words.
_GROUP_STATS = {
    ("gradients", "norm"): GRAD_NORM,
    ("grads", "norm"): GRAD_NORM,
    ("grad", "norm"): GRAD_NORM,
    ("gradients", "max"): GRAD_MAX,
    ("weights", "norm"): WEIGHT_NORM,
    ("params", "norm"): WEIGHT_NORM,
    ("parameters", "norm"): WEIGHT_NORM,
    ("activations", "max"): ACT_MAX,
    ("activations", "max_abs"): ACT_MAX,
    ("activations", "absmax"): ACT_MAX,
    ("activations", "kurtosis"): ACT_KURTOSIS,
    ("acts", "max"): ACT_MAX,
    ("acts", "kurtosis"): ACT_KURTOSIS,
}
_SUFFIX_STATS = {
    "grad_norm": GRAD_NORM,
    "grad": GRAD_NORM,
    "weight_norm": WEIGHT_NORM,
    "param_norm": WEIGHT_NORM,
    "act_max": ACT_MAX,
    "act_kurtosis": ACT_KURTOSIS,
}
# OLMo: `grad/<name>.norm`, `param/<name>.norm`, `grad/<name>.max`.
_DOTTED = {("grad", "norm"): GRAD_NORM, ("grad", "max"): GRAD_MAX, ("param", "norm"): WEIGHT_NORM}
_LIGHTNING = re.compile(r"^grad_[0-9.]+(?:inf)?_norm$|^grad_inf_norm$")
_OWN_STATS = {stat: stat for stat in LAYER_STATS}
# Words that name a whole-model series, never a layer.
_NOT_LAYERS = {"total", "global", "all", "mean", "max", "min", "train", "eval", "val", "loss"}


def _key(part: str) -> str:
    return re.sub(r"[\s\-]+", "_", part.strip().lower())


def layer_metric(name: str) -> LayerMetric | None:
    """The layer and statistic a metric name stands for, or None for a whole-run series."""
    parts = name.strip().split("/")
    while len(parts) > 2 and _key(parts[0]) in ("train", "optim", "training"):
        parts = parts[1:]
    if len(parts) < 2:
        return None
    if parts[0] == LAYER_PREFIX.rstrip("/") and len(parts) >= 3:
        stat = _OWN_STATS.get(parts[-1])
        return _found("/".join(parts[1:-1]), stat)
    head, tail = _key(parts[0]), _key(parts[-1])
    if len(parts) >= 3 and (head, tail) in _GROUP_STATS:
        return _found("/".join(parts[1:-1]), _GROUP_STATS[(head, tail)])
    rest = "/".join(parts[1:])
    if head in _PREFIX_STATS:
        return _found(rest, _PREFIX_STATS[head])
    if _LIGHTNING.match(head):
        return _found(rest, GRAD_NORM)
    if "." in rest:
        layer, _, suffix = rest.rpartition(".")
        if (head, _key(suffix)) in _DOTTED:
            return _found(layer, _DOTTED[(head, _key(suffix))])
    if tail in _SUFFIX_STATS and len(parts) >= 2:
        return _found("/".join(parts[:-1]), _SUFFIX_STATS[tail])
    return None


def _found(layer: str, stat: str | None) -> LayerMetric | None:
    if stat is None or not layer or _key(layer) in _NOT_LAYERS:
        return None
    return LayerMetric(layer, stat)
