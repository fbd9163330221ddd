"""The generic step-line reader (readers/step_lines.py): `step N … loss: X` stdout logs.

Three kinds of evidence that it generalizes beyond the lines it was written against:
- a real training loop (fixtures/make_step_line_logs.py) printing its numbers in other producers'
  formats: the healthy run stays healthy, the planted LR jump is headlined at its step;
- the real logs of producers that have a reader of their own (Megatron-LM's, modded-nanogpt's in
  ../shared/realdata): read generically, the same loss, LR and grad norm at the same steps;
- lines in the form each producer's source prints them, one per producer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.readers.step_lines import StepLineLogReader
from tscope.ingest.registry import READERS
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "step_lines"
PLANTED = json.loads((FIXTURES / "planted.json").read_text())
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
READER = StepLineLogReader()


def _series(path: Path, reader: object = READER) -> dict[str, dict[int, float]]:
    read = reader.read(path, path.name)  # type: ignore[attr-defined]
    table = read.metrics
    out: dict[str, dict[int, float]] = {}
    for code, name in enumerate(table.metric.labels):
        chosen = table.metric.codes == code
        out[name] = dict(
            zip(table.step[chosen].tolist(), table.value[chosen].tolist(), strict=True)
        )
    return out


def _write(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


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
    series = _series(FIXTURES / "healthy" / f"{fmt}.log")
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
        theirs, ours = _series(path, own), _series(path)
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


def test_evaluation_records_give_the_eval_loss(tmp_path: Path) -> None:
    # fairseq's validation line and MaxText's eval line carry a plain `loss`.
    log = _write(
        tmp_path,
        "\n".join(
            [f"step {s} | loss: {3.0 - s * 0.01:.4f} | lr 1.0e-03" for s in range(1, 11)]
            + ["epoch 001 | valid on 'valid' subset | loss 2.8 | ppl 7.46 | num_updates 10"]
            + ["eval metrics after step: 5, loss=2.75, total_weights=512"]
        ),
    )
    series = _series(log)
    assert series[EVAL_LOSS] == {10: 2.8, 5: 2.75}
    assert series[LOSS] == {s: pytest.approx(3.0 - s * 0.01) for s in range(1, 11)}


def test_indented_lines_after_a_step_header_belong_to_its_record(tmp_path: Path) -> None:
    records = []
    for step in range(1, 6):
        records += [f"[batch={step}/100]:", f"\t Train loss/train/total: {4.0 - step / 10}"]
        records += [f"\t Train lr-DecoupledAdamW/group0: {step * 1e-4}", "Epoch end"]
    series = _series(_write(tmp_path, "\n".join(records)))
    assert series[LOSS] == {step: pytest.approx(4.0 - step / 10) for step in range(1, 6)}
    assert series[LEARNING_RATE] == {step: pytest.approx(step * 1e-4) for step in range(1, 6)}


def test_strongest_step_key_wins(tmp_path: Path) -> None:
    # litgpt counts micro-batches as `iter` and optimizer steps as `step`; fairseq prints the
    # iteration within the epoch before `num_updates`.
    lines = [
        f"Epoch 1 | iter {4 * s} step {s} | loss train: {2.0 + s / 100:.3f}, val: n/a | "
        "iter time: 12.30 ms"
        for s in range(1, 5)
    ] + [
        f"epoch 002:     {s} / 10 loss=1.5, gnorm=0.5, num_updates={100 + s}, lr=0.0003"
        for s in range(1, 4)
    ]
    series = _series(_write(tmp_path, "\n".join(lines)))
    assert sorted(series[LOSS]) == [1, 2, 3, 4, 101, 102, 103]
    assert series[GRAD_NORM] == {101: 0.5, 102: 0.5, 103: 0.5}


@pytest.mark.parametrize(
    "text",
    [
        "Collecting torch\n  Downloading torch-2.13.0.whl\nloss of connection, retrying\n" * 20,
        "\n".join(
            f"[deepspeed] OVERFLOW! Rank 0 Skipping step. loss scale: {2**i}" for i in range(9)
        ),
        "\n".join(f"epoch {e}: loss {1 / (e + 1):.3f}" for e in range(20)),  # no step key
        "\n".join(f"step {s} done in 0.5 s" for s in range(20)),  # no loss
    ],
)
def test_text_that_is_not_a_step_log_is_not_claimed(text: str, tmp_path: Path) -> None:
    assert not READER.can_read(_write(tmp_path, text))


def test_a_step_log_without_a_loss_is_unreadable_with_the_reason(tmp_path: Path) -> None:
    log = _write(tmp_path, "\n".join(f"step {s} | lr 1e-3 | loss: n/a" for s in range(5)))
    with pytest.raises(UnreadableInput, match="step-line"):
        READER.read(log, log.name)


def test_hostile_lines_are_read_in_linear_time(tmp_path: Path) -> None:
    # A megabyte of name-like words with no number, and one of step records run together: each
    # costs a bounded amount of regex work per character (no nested backtracking).
    words = _write(tmp_path, ("a" * 59 + " ") * 17_000 + "\n", "words.log")
    records = _write(tmp_path, "step 1 loss: 2.0 " * 60_000 + "\n" + "step 2 loss: 2.0\n" * 3)
    assert not READER.can_read(words)
    assert READER.can_read(records)
    series = _series(records)
    assert set(series[LOSS]) == {1, 2}


@pytest.mark.parametrize("fmt", PLANTED["formats"])
def test_every_format_reads_the_loop_s_loss(fmt: str) -> None:
    """The same run printed every way reads as the same loss, to the format's printed precision
    (timm's 3 significant digits the coarsest); fairseq's bits come back as nats."""
    reference = _series(FIXTURES / "lr_jump" / "llm_c.log")[LOSS]  # %f: 6 decimals
    shift = 1 if fmt in PLANTED["counts_from_zero"] else 0
    ours = _series(FIXTURES / "lr_jump" / f"{fmt}.log")[LOSS]
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


def test_json_records_printed_by_a_logger(tmp_path: Path) -> None:
    # fairseq --log-format json: `logger.info(json.dumps(stats))` under its logging prefix, the
    # stats formatted as strings; a loop printing json.dumps of its numbers.
    lines = [
        f'2025-01-01 12:00:00 | INFO | train_inner | {{"epoch": 1, "update": 0.{s:03d}, '
        f'"loss": "{9.0 - s / 100:.3f}", "num_updates": "{s}", "lr": "0.0003", "gnorm": "1.5"}}'
        for s in range(1, 6)
    ] + [f'{{"step": {s}, "loss": {2.0 + s / 10}, "lr": 0.001}}' for s in range(10, 13)]
    series = _series(_write(tmp_path, "\n".join(lines)))
    bits = np.log(2)
    assert series[LOSS] == {
        **{s: pytest.approx((9.0 - s / 100) * bits) for s in range(1, 6)},
        **{s: pytest.approx(2.0 + s / 10) for s in range(10, 13)},
    }
    assert series[GRAD_NORM] == {s: 1.5 for s in range(1, 6)}


@pytest.mark.parametrize(
    "crafted",
    ["loss", "loss:", "step", "step:", "loss: [", "step [", '"loss"', "train loss (s)"],
)
def test_a_name_followed_by_a_megabyte_of_spaces_is_read_in_linear_time(
    crafted: str, tmp_path: Path
) -> None:
    """Before the separators were made unambiguous, a name or step key followed by n spaces cost
    regex work in n² (8,000 spaces: 1.7 s; this megabyte: hours)."""
    from hostile import run_tscope

    head = "".join(f"step {s} | loss: {3.0 - s / 100:.3f} | lr 1e-3\n" for s in range(1, 40))
    log = _write(tmp_path, head + crafted + " " * 1_000_000 + "x\n" + head)
    outcome = run_tscope("analyze", log, "--out", tmp_path / "case", timeout=60)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_a_producer_sniff_that_finds_no_records_falls_back_to_step_lines(tmp_path: Path) -> None:
    """A nanoGPT fork echoes nanoGPT's configurator (`Overriding config with …`, which the nanoGPT
    reader sniffs) but prints its own step lines: read as step lines, not refused."""
    log = _write(
        tmp_path,
        "Overriding config with config/train_gpt2.py:\n"
        "batch_size = 12\n"
        "tokens per iteration will be: 491,520\n"
        + "".join(f"step {s} | loss {4.0 - s / 50:.4f} | lr 6.0e-04\n" for s in range(1, 60)),
    )
    case, run = analyze_run(log)
    assert [s.kind for s in run.sources] == ["step_lines"]
    assert case.summary.status == "healthy"


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
    case, _ = analyze_run(_write(tmp_path, _torchtitan_lines(steps)))
    card = case.summary.card
    assert card is not None and card.cause.category == "resume_discontinuity"
    cause = next(f for f in case.findings if f.id == card.cause.finding_id)
    assert cause.severity == "critical" and cause.step == 180


def test_nan_losses_printed_as_nan_are_non_finite_points(tmp_path: Path) -> None:
    numbers = _healthy_numbers()
    steps = [(s, numbers[s - 1][0] if s < 250 else float("nan"), 1.0) for s in range(1, 301)]
    case, run = analyze_run(_write(tmp_path, _torchtitan_lines(steps)))
    _, values = run.series(LOSS)
    assert np.isnan(values).sum() == 51
    nan_finding = next(f for f in case.findings if f.category == "nan_loss")
    assert nan_finding.severity == "critical" and nan_finding.step == 250


# ---- the review's findings (red-team of the reader, 2026-12-06) --------------------------------


def test_letters_that_fold_onto_a_step_key_are_no_step(tmp_path: Path) -> None:
    # `ſ` folds onto `s` and `ı` onto `i` under Unicode case folding: a traceback before.
    log = _write(tmp_path, "ſtep 1 loss 2.0\nıter 2 loss 1.9\nİter 3 loss 1.8\n" * 3)
    assert not READER.can_read(log)


def test_a_per_epoch_step_counter_is_made_global(tmp_path: Path) -> None:
    """The PyTorch tutorial's `Epoch [e/5], Step [s/600], Loss: x` and `Epoch e | Batch b | …`
    restart their counter every epoch: all epochs are read, at global steps."""
    tutorial = "".join(
        f"Epoch [{e}/5], Step [{s}/600], Loss: {2.0 - e / 10 - s / 10_000:.4f}\n"
        for e in range(1, 6)
        for s in range(100, 700, 100)
    )
    series = _series(_write(tmp_path, tutorial, "tutorial.log"))
    assert sorted(series[LOSS]) == [
        (e - 1) * 600 + s for e in range(1, 6) for s in range(100, 700, 100)
    ]
    untotalled = "".join(
        f"Epoch {e} | Batch {b} | Loss {1.0 / (e + b):.4f}\n"
        for e in range(3)
        for b in (10, 20, 30)
    )
    series = _series(_write(tmp_path, untotalled, "batches.log"))
    assert sorted(series[LOSS]) == [10, 20, 30, 40, 50, 60, 70, 80, 90]


def test_a_global_step_beside_an_epoch_is_left_as_printed(tmp_path: Path) -> None:
    text = "".join(f"epoch {s // 100} step {s}/1000 loss {2.0:.1f}\n" for s in range(10, 400, 10))
    assert sorted(_series(_write(tmp_path, text))[LOSS]) == list(range(10, 400, 10))


@pytest.mark.parametrize(
    "other", ["aux loss", "z loss", "avg loss", "rank0 loss", "test loss", "packet loss"]
)
def test_another_loss_printed_first_is_not_the_training_loss(other: str, tmp_path: Path) -> None:
    text = "".join(
        f"step {s} | {other}: 0.01 | loss: {3.0 - s / 100:.3f} | lr 3e-4\n" for s in range(1, 20)
    )
    series = _series(_write(tmp_path, text))
    assert series[LOSS][5] == pytest.approx(2.95)


def test_min_lr_and_param_norm_are_not_the_lr_and_grad_norm(tmp_path: Path) -> None:
    text = "".join(f"step {s} | loss {2.0:.1f} | min lr 1e-5 | param norm 50.0\n" for s in range(9))
    series = _series(_write(tmp_path, text))
    assert LEARNING_RATE not in series and GRAD_NORM not in series


def test_evaluation_records_are_told_from_fields(tmp_path: Path) -> None:
    lines = [f"step {s} | loss {3.0:.1f} | val 3.20 | best val: n/a" for s in range(1, 6)]
    lines += ["Evaluation: step 5 | loss 2.5"]
    series = _series(_write(tmp_path, "\n".join(lines)))
    assert series[LOSS] == {s: 3.0 for s in range(1, 6)}
    assert series[EVAL_LOSS] == {5: 2.5}


def test_thousands_separators_and_human_format_suffixes(tmp_path: Path) -> None:
    # nanotron's human_format prints `2.34K`; others print `1,204.51`.
    text = "".join(
        f"iteration: {s} | lm_loss: 2.34K | grad_norm: 1,204.51 | loss_scale: 65,536\n"
        for s in range(1, 6)
    )
    series = _series(_write(tmp_path, text))
    assert series[LOSS][3] == pytest.approx(2340.0)
    assert series[GRAD_NORM][3] == pytest.approx(1204.51)


def test_an_indented_block_after_a_full_step_line_is_not_its_record(tmp_path: Path) -> None:
    text = "step 0 | loss 3.0\n  optimizer:\n    lr: 0.0006\n" + "".join(
        f"step {s} | loss {3.0 - s / 10:.1f}\n" for s in range(1, 6)
    )
    assert LEARNING_RATE not in _series(_write(tmp_path, text))


def test_a_sentence_s_closing_dot_and_a_charset_escape(tmp_path: Path) -> None:
    text = "".join(
        f"\x1b(Bstep {s}: the loss was 2.5, loss: {2.0 + s / 10:.1f}.\n" for s in range(1, 6)
    )
    assert _series(_write(tmp_path, text))[LOSS][2] == pytest.approx(2.2)


def test_a_run_restarted_under_torchrun_keeps_its_unprefixed_steps(tmp_path: Path) -> None:
    """Steps 1-30 printed by a single process, then 31-60 by torchrun's ranks ([rank0]:,
    [rank1]:): rank 0's lines continue the unprefixed ones; rank 1's are left out."""
    text = "".join(f"step {s} | loss {3.0 - s / 100:.2f}\n" for s in range(1, 31))
    text += "".join(
        f"[rank{r}]:step {s} | loss {3.0 - s / 100 + r:.2f}\n"
        for s in range(31, 61)
        for r in (0, 1)
    )
    series = _series(_write(tmp_path, text))
    assert sorted(series[LOSS]) == list(range(1, 61))
    assert series[LOSS][45] == pytest.approx(2.55)


def test_torchvision_and_word_language_model_epoch_positions(tmp_path: Path) -> None:
    # pytorch/vision references/classification/utils.py MetricLogger.log_every (index 0-based,
    # `loss: now (mean)`), pytorch/examples word_language_model/main.py's train() print.
    vision = "".join(
        f"Epoch: [{e}]  [{b:>3}/200]  eta: 0:00:10  lr: 0.1  img/s: 512.0  "
        f"loss: {2.0 - e / 10:.4f} ({2.1:.4f})  time: 0.0500  data: 0.0010\n"
        for e in range(3)
        for b in (0, 100)
    )
    series = _series(_write(tmp_path, vision, "vision.log"))
    assert sorted(series[LOSS]) == [0, 100, 200, 300, 400, 500]
    assert series[LOSS][200] == pytest.approx(1.9)
    assert series[LEARNING_RATE][500] == pytest.approx(0.1)
    language = "".join(
        f"| epoch {e:3d} | {b:5d}/ 2983 batches | lr 20.00 | ms/batch 45.67 | "
        f"loss {7.0 - e / 10:5.2f} | ppl  2064.21\n"
        for e in (1, 2)
        for b in (200, 400)
    )
    series = _series(_write(tmp_path, language, "language.log"))
    assert sorted(series[LOSS]) == [200, 400, 3183, 3383]


# ---- the second review's findings (2026-12-06) ------------------------------------------------


def test_a_megabyte_of_digits_in_a_value_is_read_in_linear_time(tmp_path: Path) -> None:
    """`\\d+\\.?\\d*` split a run of n digits n ways: 20,000 digits took 16.8 s."""
    from hostile import run_tscope

    head = "".join(f"step {s} | loss: {3.0 - s / 100:.3f}\n" for s in range(1, 40))
    log = _write(tmp_path, head + "step 50 | loss " + "1" * 1_000_000 + ".5.5\n" + head)
    outcome = run_tscope("analyze", log, "--out", tmp_path / "case", timeout=60)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_eval_records_after_a_logger_prefix_and_fields_named_val(tmp_path: Path) -> None:
    lines = []
    for s in range(100, 1100, 100):
        lines.append(
            f"2024-01-01 12:00:00,123 INFO step {s} | loss {3.0 - s / 1000:.3f} | val loss 9.9"
        )
        lines.append(f"2024-01-01 12:00:00,123 INFO eval step {s} | loss {2.5:.1f}")
        lines.append(f"  step {s} | loss {3.0 - s / 1000:.3f} | eval every 500 steps")
    series = _series(_write(tmp_path, "\n".join(lines)))
    assert series[LOSS] == {s: pytest.approx(3.0 - s / 1000) for s in range(100, 1100, 100)}
    assert set(series[EVAL_LOSS].values()) == {2.5}  # the eval records; `val loss` fields first


def test_an_evaluation_counter_between_epochs_does_not_move_the_epochs(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 4):
        lines += [f"Epoch {e} | Batch {b} | Loss {2.0 / e:.3f}" for b in range(50, 550, 50)]
        lines.append(f"Epoch {e} | Validation | Batch 20 | Loss {1.9 / e:.3f}")
    series = _series(_write(tmp_path, "\n".join(lines)))
    assert sorted(series[LOSS]) == [
        (e - 1) * 500 + b for e in range(1, 4) for b in range(50, 550, 50)
    ]


def test_names_right_after_a_parenthesis_and_a_header_carrying_the_lr(tmp_path: Path) -> None:
    text = "".join(f"step {s} (loss: {2.0 + s / 100:.2f}, lr: 3e-4)\n" for s in range(1, 20))
    assert _series(_write(tmp_path, text, "paren.log"))[LOSS][5] == pytest.approx(2.05)
    header = "".join(
        f"Step {s}/200 | lr 3.00e-04\n    loss: {2.0 + s / 100:.2f}\n" for s in range(1, 20)
    )
    assert _series(_write(tmp_path, header, "header.log"))[LOSS][5] == pytest.approx(2.05)


def test_steps_with_thousands_separators(tmp_path: Path) -> None:
    text = "".join(f"Step {s:,}/5,000 | loss {2.0:.1f}\n" for s in range(100, 5000, 100))
    assert sorted(_series(_write(tmp_path, text))[LOSS]) == list(range(100, 5000, 100))


def test_a_resume_that_counts_the_epoch_up_is_not_a_new_epoch(tmp_path: Path) -> None:
    # A global step with its total, falling back from 3000 to 2000 at a resume that numbered the
    # epoch up: the steps stay as printed (the resume is the assembly's to see).
    text = "".join(f"epoch 1 step {s}/5000 loss 2.0\n" for s in range(100, 3100, 100))
    text += "".join(f"epoch 2 step {s}/5000 loss 2.0\n" for s in range(2000, 3100, 100))
    steps = sorted(_series(_write(tmp_path, text))[LOSS])
    assert max(steps) == 3000


_TOKENS = [
    "step", "Step", "steps", "iter", "iteration", "batch", "global_step", "num_updates", "epoch",
    "Epoch", "loss", "train loss", "val", "eval", "valid", "lr", "grad_norm", "norm", "Iter(train)",
    "Epoch(train)", "Train:", "Epoch:", "[", "]", "(", ")", ":", "=", "|", ",", "/", ".", " ", "  ",
    "\t", "\r", "\x1b[31m", "[rank1]:", "0: ", "1", "12", "1,234", "0.5", "3e-4", "2.3K", "nan",
    "-inf", "ſ", "İ", "١", "'", '"', "tensor(", "batches", "| epoch", "\n", "\n    ",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=120))
def test_any_arrangement_of_the_grammar_s_tokens_reads_or_is_refused(tokens: list[str]) -> None:
    """Property: a log made of the grammar's own tokens in any order is claimed or not, and read
    into points or refused with UnreadableInput: never another exception."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "train.log"
        log.write_text("".join(tokens) * 3, encoding="utf-8")
        if READER.can_read(log):
            try:
                read = READER.read(log, log.name)
            except UnreadableInput:
                return
            assert np.isfinite(read.metrics.step).all()
