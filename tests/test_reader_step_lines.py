"""The generic step-line reader (readers/step_lines.py) on what producers print.

Three kinds of evidence that it generalizes beyond the lines it was written against:
- a real training loop (fixtures/make_step_line_logs.py) printing its numbers in other producers'
  formats: the healthy run stays healthy, the planted LR jump is headlined at its step;
- five stacks' own training loops (fixtures/data/step_lines_real/): the same, from their logs;
- the real logs of producers that have a reader of their own (Megatron-LM's in
  ../shared/realdata): read generically, the same loss, LR and grad norm at the same steps.
The grammar's line-level cases and hostile lines: tests/test_step_line_grammar.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from step_line_logs import READER, series_in, write_log

from tscope.ingest.registry import READERS
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "step_lines"
PLANTED = json.loads((FIXTURES / "planted.json").read_text())
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.mark.parametrize("fmt", PLANTED["formats"])
def test_healthy_run_printed_in_each_format_is_healthy(fmt: str, tmp_path: Path) -> None:
    case, _ = analyze_run(FIXTURES / "healthy" / f"{fmt}.log")
    assert case.summary.status == "healthy", case.summary.verdict
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]


@pytest.mark.parametrize("fmt", PLANTED["formats"])
def test_planted_lr_jump_is_the_headline_where_the_lr_is_printed(fmt: str) -> None:
    """Where the format prints the LR, the jump is the headline cause at its step; where it does
    not (torchtitan, MaxText, litgpt, OLMo print no LR), the cause is undetermined, never another
    cause, and the incident starts after the jump."""
    offset = 1 if fmt in PLANTED["counts_from_zero"] else 0
    planted_step = PLANTED["runs"]["lr_jump"]["step"] - offset
    case, run = analyze_run(FIXTURES / "lr_jump" / f"{fmt}.log")
    assert [s.kind for s in run.sources] == ["step_lines"]
    assert case.summary.status == "incident"
    card = case.summary.card
    assert card is not None
    if fmt in PLANTED["prints_lr"]:
        assert card.cause.category == "lr_schedule_jump"
        cause = next(f for f in case.findings if f.id == card.cause.finding_id)
        assert cause.step == planted_step
    else:
        assert card.cause.category == "undetermined"
        assert "log the LR" in case.summary.verdict
    alerts = [f for f in case.findings if f.severity in ("warning", "critical")]
    assert {f.category for f in alerts} <= {
        "lr_schedule_jump",
        "loss_spike",
        "grad_norm_spike",
        "grad_norm_high",
    }
    assert all(f.step >= planted_step - 10 for f in alerts if f.category != "grad_norm_high")


@pytest.mark.parametrize("fmt", PLANTED["formats"])
def test_every_printed_step_is_read(fmt: str) -> None:
    series = series_in(FIXTURES / "healthy" / f"{fmt}.log")
    first = 0 if fmt in PLANTED["counts_from_zero"] else 1
    steps = list(range(first, PLANTED["steps"] + first))
    assert sorted(series[LOSS]) == steps
    if fmt in PLANTED["prints_lr"]:
        assert sorted(series[LEARNING_RATE]) == steps


def _realdata_logs() -> list[Path]:
    if not REALDATA.is_dir():
        return []
    return sorted(
        path
        for folder in ("megatron_logs", "modded_nanogpt")
        if (REALDATA / folder).is_dir()
        for path in (REALDATA / folder).rglob("*")
        if path.is_file() and READER.can_read(path)
    )


@pytest.mark.skipif(not _realdata_logs(), reason="../shared/realdata is absent")
def test_real_logs_of_other_producers_read_the_same_generically() -> None:
    """On the real Megatron and modded-nanogpt logs, the generic reading agrees with the
    producer's own reader on every loss point; the LR and grad norm too, except where a terminal
    wrapped a record mid-field (the Megatron reader rejoins those lines, this one does not)."""
    compared = 0
    for path in _realdata_logs():
        own = next(r for r in READERS if r is not READER and r.can_read(path))
        theirs, ours = series_in(path, own), series_in(path)
        for name in (LOSS, LEARNING_RATE, GRAD_NORM):
            if name not in theirs:
                continue
            agree = [
                step
                for step, value in theirs[name].items()
                if step in ours.get(name, {}) and np.isclose(ours[name][step], value)
            ]
            share = len(agree) / len(theirs[name])
            assert share == 1.0 if name == LOSS else share >= 0.6, (path.name, name, share)
            extra = set(ours.get(name, {})) - set(theirs[name])
            assert not extra, (path.name, name, sorted(extra)[:5])
            compared += 1
    assert compared >= 5


def test_the_registry_asks_every_producer_reader_first() -> None:
    names = [reader.name for reader in READERS]
    for own in ("megatron_log", "nanogpt_log", "modded_nanogpt_log", "hf_trainer_stdout"):
        assert names.index(own) < names.index("step_lines")


@pytest.mark.parametrize("fmt", PLANTED["formats"])
def test_every_format_reads_the_loop_s_loss(fmt: str) -> None:
    """The same run printed every way reads as the same loss, to the format's printed precision
    (timm's 3 significant digits the coarsest); fairseq's bits come back as nats."""
    reference = series_in(FIXTURES / "lr_jump" / "llm_c.log")[LOSS]  # %f: 6 decimals
    shift = 1 if fmt in PLANTED["counts_from_zero"] else 0
    ours = series_in(FIXTURES / "lr_jump" / f"{fmt}.log")[LOSS]
    assert len(ours) == len(reference)
    for step, value in reference.items():
        assert ours[step - shift] == pytest.approx(value, rel=3e-3), step


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "step_lines_real"
REAL_LOGS = sorted(REAL.glob("*/*/*.log.gz"))
# litgpt's step line prints neither the LR nor the gradient norm.
PRINTS_NO_LR = ("litgpt",)
REAL_LR_JUMP_STEP = 200


def _unpacked(gz: Path, tmp_path: Path) -> Path:
    import gzip

    path = tmp_path / gz.name.removesuffix(".gz")
    path.write_bytes(gzip.decompress(gz.read_bytes()))
    return path


def test_real_logs_are_committed() -> None:
    assert {p.parts[-3] for p in REAL_LOGS} == {
        "composer",
        "fairseq",
        "litgpt",
        "mmengine",
        "torchtune",
    }


@pytest.mark.parametrize("gz", REAL_LOGS, ids=lambda p: "/".join(p.parts[-3:]))
def test_real_stack_logs_are_read_and_judged(gz: Path, tmp_path: Path) -> None:
    """The stacks' own loops: the healthy runs stay healthy; the LR ×30 at step 200 is the
    headline cause where the LR is printed (the stacks log it at 200 or 201: the LR set for the
    next step, or the one this step used), and undetermined where it is not."""
    stack, run = gz.parts[-3], gz.parts[-2]
    log = _unpacked(gz, tmp_path)
    assert READER.can_read(log)
    case, read_run = analyze_run(log)
    assert [s.kind for s in read_run.sources] == ["step_lines"]
    alerts = [f for f in case.findings if f.severity in ("warning", "critical")]
    if run == "healthy":
        assert case.summary.status == "healthy", case.summary.verdict
        assert not alerts
        return
    card = case.summary.card
    assert case.summary.status == "incident" and card is not None
    if stack in PRINTS_NO_LR:
        assert card.cause.category == "undetermined"
        return
    assert card.cause.category == "lr_schedule_jump", case.summary.verdict
    cause = next(f for f in case.findings if f.id == card.cause.finding_id)
    interval = 10 if "interval10" in gz.name else 1
    assert REAL_LR_JUMP_STEP <= cause.step <= REAL_LR_JUMP_STEP + interval


def test_a_producer_sniff_that_finds_no_records_falls_back_to_step_lines(tmp_path: Path) -> None:
    """A nanoGPT fork echoes nanoGPT's configurator (`Overriding config with …`, which the nanoGPT
    reader sniffs) but prints its own step lines: read as step lines, not refused."""
    log = write_log(
        tmp_path,
        "Overriding config with config/train_gpt2.py:\n"
        "batch_size = 12\n"
        "tokens per iteration will be: 491,520\n"
        + "".join(f"step {s} | loss {4.0 - s / 50:.4f} | lr 6.0e-04\n" for s in range(1, 60)),
    )
    case, run = analyze_run(log)
    assert [s.kind for s in run.sources] == ["step_lines"]
    assert case.summary.status == "healthy"


@pytest.mark.parametrize(
    "settings",
    [
        "config: lr=0.001 batch_size=128 steps=3000 model=mlp-2x64 loss=gaussian_nll",
        "Namespace(lr=0.001, steps=3000, batch_size=128)",
        "2026-01-01 12:00:00 INFO args: steps=3000 lr=0.001",
    ],
)
def test_a_settings_line_printed_before_training_is_not_a_step(settings: str, tmp_path: Path):
    # Its `steps=3000` read as step 3000 before step 20: a resume (healthy-run hunt, session 26).
    log = write_log(
        tmp_path,
        settings
        + "\n"
        + "".join(f"step={s} loss={1.2 - s / 5000:.4f} lr=0.001\n" for s in range(20, 3001, 20)),
    )
    _case, run = analyze_run(log)
    assert run.events_of("resume") == []
    assert int(run.series(LOSS)[0][0]) == 20


def _mnist_example_log(spike_at: int | None = None) -> str:
    """The exact lines of PyTorch's examples/mnist/main.py (batch 64, --log-interval 10): the
    sample position within the epoch, its percent, a tab, the loss; a test-set summary after
    each epoch."""
    lines = []
    for epoch in range(1, 6):
        for batch in range(0, 938, 10):
            seen = batch * 64
            loss = 0.05 + 2.25 * np.exp(-((epoch - 1) * 938 + batch) / 400)
            loss *= 1 + 0.05 * np.sin(batch)
            if spike_at == (epoch - 1) * 60000 + seen:
                loss *= 8
            lines.append(
                f"Train Epoch: {epoch} [{seen}/60000 ({100.0 * batch / 938:.0f}%)]\tLoss: {loss:.6f}"
            )
        lines.append("\nTest set: Average loss: 0.0400, Accuracy: 9870/10000 (99%)\n")
    return "\n".join(lines) + "\n"


def test_the_pytorch_mnist_example_s_log_is_read_on_a_sample_axis(tmp_path: Path) -> None:
    # The most copied PyTorch loop was "unknown format" (healthy-run hunt, session 26).
    case, run = analyze_run(write_log(tmp_path, _mnist_example_log()))
    steps, _ = run.series(LOSS)
    assert steps[:3].tolist() == [0, 640, 1280]
    assert int(steps[-1]) == 4 * 60000 + 930 * 64
    assert "epoch_sample_position" in [c.kind for c in case.caveats]
    assert case.summary.status == "healthy"


def test_a_spike_in_the_mnist_example_s_log_is_found_at_its_sample_position(
    tmp_path: Path,
) -> None:
    at = 2 * 60000 + 500 * 64
    case, _ = analyze_run(write_log(tmp_path, _mnist_example_log(spike_at=at)))
    assert case.summary.status == "incident"
    assert case.findings[0].step == at


def _healthy_numbers() -> list[tuple[float, float, float]]:
    """(loss, grad norm, lr) of each step of the healthy fixture run, read from its llm.c log."""
    numbers = []
    for line in (FIXTURES / "healthy" / "llm_c_2024.log").read_text().splitlines():
        if line.startswith("step"):
            words = line.split()
            numbers.append((float(words[4]), float(words[6]), float(words[8])))
    return numbers


def _torchtitan_lines(steps: list[tuple[int, float, float]]) -> str:
    prefix = "[titan] 2026-01-01 12:00:00,000 - root - INFO - "
    return "".join(
        f"{prefix}\033[31mstep: {s:2}  \033[32mloss: {loss:8.5f}  \033[33mgrad_norm: {norm:7.4f}"
        f"  \033[34mtps: 10,240\033[39m\n"
        for s, loss, norm in steps
    )


def test_a_resume_that_lost_the_weights_inside_one_appended_log(tmp_path: Path) -> None:
    """A job resumed with `>> train.log` prints steps 180.. again after 200; here the weights
    were lost (the loss is back at its first values): a critical resume at step 180."""
    numbers = _healthy_numbers()
    steps = [(s, numbers[s - 1][0], numbers[s - 1][1]) for s in range(1, 201)]
    steps += [(s, numbers[s - 180][0], numbers[s - 180][1]) for s in range(180, 301)]
    case, _ = analyze_run(write_log(tmp_path, _torchtitan_lines(steps)))
    card = case.summary.card
    assert card is not None and card.cause.category == "resume_discontinuity"
    cause = next(f for f in case.findings if f.id == card.cause.finding_id)
    assert cause.severity == "critical" and cause.step == 180


def test_nan_losses_printed_as_nan_are_non_finite_points(tmp_path: Path) -> None:
    numbers = _healthy_numbers()
    steps = [(s, numbers[s - 1][0] if s < 250 else float("nan"), 1.0) for s in range(1, 301)]
    case, run = analyze_run(write_log(tmp_path, _torchtitan_lines(steps)))
    _, values = run.series(LOSS)
    assert np.isnan(values).sum() == 51
    nan_finding = next(f for f in case.findings if f.category == "nan_loss")
    assert nan_finding.severity == "critical" and nan_finding.step == 250
