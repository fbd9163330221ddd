"""The case's `replay` section, typed: what case.json keeps of a `tscope replay` (replay.json has
everything). tscope.replay_pipeline.replay_section writes its JSON shape; `from_dict` reads it
back and `to_dict` writes the same shape. A field an older or hand-edited file lacks is None (the
renderer words it as unknown); a field of the wrong type is refused (CaseFormatError)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tscope.model.case_fields import Fields
from tscope.model.replay_statistics import ReplayStatistic, undeclared_statistic


@dataclass(frozen=True)
class ReplayCheckpoint:
    step: int | None
    path: str | None
    format: str | None


@dataclass(frozen=True)
class ReplayFidelity:
    """How closely the replay reproduced the logged losses (tscope.model.replay.Fidelity)."""

    compared_steps: float | None
    reproduced: bool | None
    max_rel_loss_diff: float | None
    tolerance: float | None
    bit_exact_steps: float | None
    nonfinite_agreed_steps: float | None
    grad_norm_reproduced: bool | None
    max_rel_grad_norm_diff: float | None
    first_mismatch_step: int | None
    logged_decimals: int | None
    reasons: tuple[tuple[str, str], ...]  # (code, message), most likely first
    mismatched_steps: tuple[float | None, ...] = ()  # logged losses the replay did not reproduce
    logging_window: float | None = None  # the longest logging window compared (logging_steps)


@dataclass(frozen=True)
class ReplayRestore:
    """What was restored from the checkpoint, and what the replay assumed."""

    optimizer: bool
    scheduler: bool
    rng: bool
    scaler: bool
    lr_source: str
    loss_path: str
    notes: tuple[str, ...]
    caveats: tuple[str, ...]

    def restored(self, part: str) -> bool:
        """Whether `part` ("optimizer", "scheduler", "rng", "scaler") was restored."""
        parts = {
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "rng": self.rng,
            "scaler": self.scaler,
        }
        return parts[part]


@dataclass(frozen=True)
class ReplayedStep:
    step: float | None
    loss: float | None
    logged_loss: float | None
    grad_norm: float | None
    learning_rate: float | None
    update_skipped: bool


@dataclass(frozen=True)
class FlaggedSample:
    step: float | None
    index: float | None
    loss: float | None
    share: float | None


@dataclass(frozen=True)
class WhatIf:
    """One what-if replay and its judgement (tscope.model.replay.InterventionOutcome)."""

    name: str
    params: dict[str, Any]
    peak_loss: float | None
    peak_step: int | None
    baseline_peak_loss: float | None
    baseline_peak_step: int | None
    spike_line: float | None
    spike_removed: bool
    checkpoint_step: int | None
    losses: tuple[tuple[float | None, float | None], ...]  # (step, loss) over the window
    removed_fraction: float | None
    effect: str | None  # None in a case written before effects were named
    conclusive: bool | None


@dataclass(frozen=True)
class LayerSeries:
    """One per-layer statistic: layers × replayed steps (None where not measured)."""

    layers: tuple[str, ...]
    steps: tuple[float | None, ...]
    values: tuple[tuple[float | None, ...], ...]


@dataclass(frozen=True)
class ResumeCheck:
    checkpoint: str | None
    steps: tuple[float | None, ...]
    reproduced: bool
    max_rel_loss_diff: float | None


@dataclass(frozen=True)
class ReplaySection:
    payload: dict[str, Any]  # the section as written: to_dict gives it back unchanged
    checkpoint: ReplayCheckpoint
    steps: tuple[float | None, ...]  # first and last replayed step
    around: float | None
    window: tuple[float | None, ...]  # offsets around `around`, e.g. (-5, 5)
    device: str | None
    deterministic: bool
    fidelity: ReplayFidelity
    restore: ReplayRestore
    cause: str | None  # "data", "state" or None
    per_step: tuple[ReplayedStep, ...]
    bad_samples: tuple[FlaggedSample, ...]
    interventions: tuple[WhatIf, ...]
    layer_series: dict[str, LayerSeries]
    # the descriptors of the statistics in layer_series (title, unit, axis), the key ones in the
    # order they are charted; a case an older tscope wrote has none (`tscope report` adds them)
    statistics: tuple[ReplayStatistic, ...]
    files: tuple[str, ...]
    resume_checks: tuple[ResumeCheck, ...]

    def statistic(self, name: str) -> ReplayStatistic:
        for described in self.statistics:
            if described.name == name:
                return described
        return undeclared_statistic(name)

    def key_statistics(self) -> tuple[str, ...]:
        """The statistics charted first, in their order."""
        return tuple(described.name for described in self.statistics if described.key)

    def to_dict(self) -> dict[str, Any]:
        return self.payload

    @classmethod
    def from_dict(cls, payload: object) -> ReplaySection:
        section = Fields(payload, "case.replay")
        checkpoint = section.part("checkpoint")
        return cls(
            payload=section.data,
            checkpoint=ReplayCheckpoint(
                step=checkpoint.optional_integer("step"),
                path=checkpoint.optional_text("path"),
                format=checkpoint.optional_text("format"),
            ),
            steps=tuple(section.numbers("steps")),
            around=section.optional_number("around"),
            window=tuple(section.numbers("window")),
            device=section.optional_text("device"),
            deterministic=section.flag("deterministic"),
            fidelity=_fidelity(section.part("fidelity")),
            restore=_restore(section.part("restore")),
            cause=section.optional_text("cause"),
            per_step=tuple(_step(row) for row in section.records("per_step")),
            bad_samples=tuple(
                FlaggedSample(
                    step=sample.optional_number("step"),
                    index=sample.optional_number("index"),
                    loss=sample.optional_number("loss"),
                    share=sample.optional_number("share"),
                )
                for sample in section.records("bad_samples")
            ),
            interventions=tuple(_what_if(item) for item in section.records("interventions")),
            layer_series=_layer_series(section.part("layer_series")),
            statistics=tuple(
                ReplayStatistic(
                    name=item.text("name"),
                    title=item.text("title"),
                    unit=item.text("unit"),
                    log_preferred=item.flag("log_preferred"),
                    key=item.flag("key"),
                )
                for item in section.records("statistics")
            ),
            files=tuple(section.texts("files")),
            resume_checks=tuple(
                ResumeCheck(
                    checkpoint=check.optional_text("checkpoint"),
                    steps=tuple(check.numbers("steps")),
                    reproduced=check.flag("reproduced"),
                    max_rel_loss_diff=check.optional_number("max_rel_loss_diff"),
                )
                for check in section.records("resume_checks")
            ),
        )


def _optional_flag(fields: Fields, key: str) -> bool | None:
    return fields.flag(key) if fields.data.get(key) is not None else None


def _fidelity(fidelity: Fields) -> ReplayFidelity:
    return ReplayFidelity(
        compared_steps=fidelity.optional_number("compared_steps"),
        reproduced=_optional_flag(fidelity, "reproduced"),
        max_rel_loss_diff=fidelity.optional_number("max_rel_loss_diff"),
        tolerance=fidelity.optional_number("tolerance"),
        bit_exact_steps=fidelity.optional_number("bit_exact_steps"),
        nonfinite_agreed_steps=fidelity.optional_number("nonfinite_agreed_steps"),
        grad_norm_reproduced=_optional_flag(fidelity, "grad_norm_reproduced"),
        max_rel_grad_norm_diff=fidelity.optional_number("max_rel_grad_norm_diff"),
        first_mismatch_step=fidelity.optional_integer("first_mismatch_step"),
        logged_decimals=fidelity.optional_integer("logged_decimals"),
        reasons=tuple(
            (reason.text("code"), reason.text("message")) for reason in fidelity.records("reasons")
        ),
        mismatched_steps=tuple(fidelity.numbers("mismatched_steps")),
        logging_window=fidelity.optional_number("logging_window"),
    )


def _restore(restore: Fields) -> ReplayRestore:
    return ReplayRestore(
        optimizer=restore.flag("optimizer"),
        scheduler=restore.flag("scheduler"),
        rng=restore.flag("rng"),
        scaler=restore.flag("scaler"),
        lr_source=restore.text("lr_source"),
        loss_path=restore.text("loss_path"),
        notes=tuple(restore.texts("notes")),
        caveats=tuple(restore.texts("caveats")),
    )


def _step(row: Fields) -> ReplayedStep:
    return ReplayedStep(
        step=row.optional_number("step"),
        loss=row.optional_number("loss"),
        logged_loss=row.optional_number("logged_loss"),
        grad_norm=row.optional_number("grad_norm"),
        learning_rate=row.optional_number("learning_rate"),
        update_skipped=row.flag("update_skipped"),
    )


def _what_if(item: Fields) -> WhatIf:
    pairs = [Fields({"pair": pair}, f"{item.where}.losses") for pair in item.items("losses")]
    return WhatIf(
        name=item.text("name"),
        params=item.mapping("params"),
        peak_loss=item.optional_number("peak_loss"),
        peak_step=item.optional_integer("peak_step"),
        baseline_peak_loss=item.optional_number("baseline_peak_loss"),
        baseline_peak_step=item.optional_integer("baseline_peak_step"),
        spike_line=item.optional_number("spike_line"),
        spike_removed=item.flag("spike_removed"),
        checkpoint_step=item.optional_integer("checkpoint_step"),
        losses=tuple(_pair(pair.numbers("pair")) for pair in pairs),
        removed_fraction=item.optional_number("removed_fraction"),
        effect=item.optional_text("effect"),
        conclusive=_optional_flag(item, "conclusive"),
    )


def _pair(values: list[float | None]) -> tuple[float | None, float | None]:
    return (values[0], values[1]) if len(values) == 2 else (None, None)


def _layer_series(series: Fields) -> dict[str, LayerSeries]:
    read = {}
    for name in series.data:
        item = series.part(name)
        read[name] = LayerSeries(
            layers=tuple(item.texts("layers")),
            steps=tuple(item.numbers("steps")),
            values=tuple(tuple(row) for row in item.matrix("values")),
        )
    return read
