"""The case of a replay: the run's case with the replay's findings ranked in and a `replay` section
(what case.json keeps of replay.json: fidelity, per-step series, the charted layers, what-ifs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tscope.ingest.inputs import Inputs, ReadOptions, read_inputs
from tscope.model import Case
from tscope.model.case import json_safe
from tscope.model.replay import ReplayResult
from tscope.model.replay_section import ReplaySection
from tscope.model.replay_statistics import described
from tscope.output_writer import LAYERS_TABLE, REPLAY_JSON, SAMPLES_TABLE, STEPS_TABLE

if TYPE_CHECKING:
    from tscope.replay_pipeline import Investigation

# The case's replay section charts at most this many layers per statistic (largest peak first).
CASE_MAX_LAYERS = 24


def case_with_replay(
    investigation: Investigation, read_weights: bool = True, trust_pickle: bool = False
) -> Case:
    """The run's case, its inputs read here (replay_pipeline.run passes those it read once)."""
    inputs = read_inputs([investigation.run_dir], ReadOptions(read_weights, trust_pickle))
    return replay_case(investigation, inputs)


def replay_case(investigation: Investigation, inputs: Inputs) -> Case:
    """The run's case with the replay's findings ranked in and a `replay` section added."""
    from tscope.pipeline import analysis_of

    case = analysis_of(inputs, extra_findings=investigation.findings).case
    case.replay = ReplaySection.from_dict(json_safe(replay_section(investigation)))
    return case


def replay_section(investigation: Investigation) -> dict[str, Any]:
    """What case.json keeps of the replay (replay.json has everything), with the descriptors of
    the statistics it charts, so the case renders without the replay package."""
    from tscope.replay.stats.registry import REPLAY_STATISTICS

    result = investigation.result
    payload = result.to_dict()
    compared = {c["step"]: c for c in payload["comparisons"]}
    series = layer_series(result)
    section: dict[str, Any] = {
        "checkpoint": payload["checkpoint"],
        "steps": payload["steps"],
        "around": result.around,
        "window": list(result.window),
        "device": result.device,
        "deterministic": result.deterministic,
        "fidelity": payload["fidelity"],
        "restore": payload["restore"],
        "cause": result.cause,
        "per_step": [
            {
                "step": s.step,
                "loss": s.loss,
                "logged_loss": compared.get(s.step, {}).get("logged_loss"),
                "grad_norm": s.grad_norm,
                "learning_rate": s.learning_rate,
                "update_skipped": s.update_skipped,
            }
            for s in result.per_step
        ],
        "bad_samples": payload["bad_samples"],
        "interventions": payload["interventions"],
        "layer_series": series,
        "statistics": [statistic.to_dict() for statistic in described(series, REPLAY_STATISTICS)],
        "files": [REPLAY_JSON, STEPS_TABLE, LAYERS_TABLE, SAMPLES_TABLE],
    }
    if investigation.skips is not None and investigation.skips.batches:
        section["files"].append("skip_batches.json")
    if investigation.resume_checks:
        section["resume_checks"] = [
            {
                "checkpoint": check.checkpoint_path,
                "steps": list(check.steps),
                "reproduced": check.fidelity.reproduced,
                "max_rel_loss_diff": check.fidelity.max_rel_loss_diff,
            }
            for check in investigation.resume_checks
        ]
    return section


def with_statistic_descriptors(section: ReplaySection) -> ReplaySection:
    """A replay section an older tscope wrote (no `statistics`) with the descriptors of this one's
    observers for the statistics it holds, as a current replay writes them (`tscope report`
    renders and rewrites the case with them)."""
    from tscope.replay.stats.registry import REPLAY_STATISTICS

    payload = dict(section.payload)
    payload["statistics"] = [
        statistic.to_dict() for statistic in described(section.layer_series, REPLAY_STATISTICS)
    ]
    return ReplaySection.from_dict(payload)


def layer_series(result: ReplayResult) -> dict[str, dict[str, Any]]:
    """{statistic: {layers, steps, values (layers × steps)}} for the per-layer charts."""
    steps = [s.step for s in result.per_step]
    by_stat: dict[str, dict[str, dict[int, float]]] = {}
    for s in result.per_step:
        for layer, values in s.layers.items():
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    by_stat.setdefault(name, {}).setdefault(layer, {})[s.step] = float(value)
    series: dict[str, dict[str, Any]] = {}
    for name, layers in sorted(by_stat.items()):

        def peak(layer: str, table: dict[str, dict[int, float]] = layers) -> float:
            finite = [v for v in table[layer].values() if v == v and abs(v) != float("inf")]
            return max((abs(v) for v in finite), default=float("inf"))

        chosen = sorted(layers, key=lambda layer: (-peak(layer), layer))[:CASE_MAX_LAYERS]
        series[name] = {
            "layers": chosen,
            "steps": steps,
            "values": [[layers[layer].get(step) for step in steps] for layer in chosen],
        }
    return series
