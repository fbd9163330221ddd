"""The step-line grammar (readers/step_line_grammar.py) line by line: step keys, names, numbers,
evaluation records, epochs, ranks; what is not claimed; hostile lines, including every finding of
the two red-team reviews of the reader (2026-12-06), and a property test over the grammar's
tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from step_line_logs import READER, series_in, write_log

from tscope.errors import UnreadableInput
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS


def test_evaluation_records_give_the_eval_loss(tmp_path: Path) -> None:
    # fairseq's validation line and MaxText's eval line carry a plain `loss`.
    log = write_log(
        tmp_path,
        "\n".join(
            [f"step {s} | loss: {3.0 - s * 0.01:.4f} | lr 1.0e-03" for s in range(1, 11)]
            + ["epoch 001 | valid on 'valid' subset | loss 2.8 | ppl 7.46 | num_updates 10"]
            + ["eval metrics after step: 5, loss=2.75, total_weights=512"]
        ),
    )
    series = series_in(log)
    assert series[EVAL_LOSS] == {10: 2.8, 5: 2.75}
    assert series[LOSS] == {s: pytest.approx(3.0 - s * 0.01) for s in range(1, 11)}


def test_indented_lines_after_a_step_header_belong_to_its_record(tmp_path: Path) -> None:
    records = []
    for step in range(1, 6):
        records += [f"[batch={step}/100]:", f"\t Train loss/train/total: {4.0 - step / 10}"]
        records += [f"\t Train lr-DecoupledAdamW/group0: {step * 1e-4}", "Epoch end"]
    series = series_in(write_log(tmp_path, "\n".join(records)))
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
    series = series_in(write_log(tmp_path, "\n".join(lines)))
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
    assert not READER.can_read(write_log(tmp_path, text))


def test_a_step_log_without_a_loss_is_unreadable_with_the_reason(tmp_path: Path) -> None:
    log = write_log(tmp_path, "\n".join(f"step {s} | lr 1e-3 | loss: n/a" for s in range(5)))
    with pytest.raises(UnreadableInput, match="step-line"):
        READER.read(log, log.name)


def test_hostile_lines_are_read_in_linear_time(tmp_path: Path) -> None:
    # A megabyte of name-like words with no number, and one of step records run together: each
    # costs a bounded amount of regex work per character (no nested backtracking).
    words = write_log(tmp_path, ("a" * 59 + " ") * 17_000 + "\n", "words.log")
    records = write_log(tmp_path, "step 1 loss: 2.0 " * 60_000 + "\n" + "step 2 loss: 2.0\n" * 3)
    assert not READER.can_read(words)
    assert READER.can_read(records)
    series = series_in(records)
    assert set(series[LOSS]) == {1, 2}


def test_json_records_printed_by_a_logger(tmp_path: Path) -> None:
    # fairseq --log-format json: `logger.info(json.dumps(stats))` under its logging prefix, the
    # stats formatted as strings; a loop printing json.dumps of its numbers.
    lines = [
        f'2025-01-01 12:00:00 | INFO | train_inner | {{"epoch": 1, "update": 0.{s:03d}, '
        f'"loss": "{9.0 - s / 100:.3f}", "num_updates": "{s}", "lr": "0.0003", "gnorm": "1.5"}}'
        for s in range(1, 6)
    ] + [f'{{"step": {s}, "loss": {2.0 + s / 10}, "lr": 0.001}}' for s in range(10, 13)]
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    bits = np.log(2)
    assert series[LOSS] == {
        **{s: pytest.approx((9.0 - s / 100) * bits) for s in range(1, 6)},
        **{s: pytest.approx(2.0 + s / 10) for s in range(10, 13)},
    }
    assert series[GRAD_NORM] == {s: 1.5 for s in range(1, 6)}


def test_fairseq_json_validation_records_keep_their_step(tmp_path: Path) -> None:
    # fairseq's JsonProgressBar prefixes a validation record's stats with the subset's name,
    # `valid_num_updates` included: its validation loss was dropped for want of a step.
    lines = [
        f'2025-01-01 12:00:00 | INFO | train_inner | {{"epoch": 1, "update": 0.{s:03d}, '
        f'"loss": "{9.0 - s / 100:.3f}", "num_updates": "{s}", "lr": "0.0003", "gnorm": "1.5"}}'
        for s in range(1, 6)
    ] + [
        '2025-01-01 12:00:00 | INFO | valid | {"epoch": 1, "valid_loss": "8.5", '
        '"valid_nll_loss": "8.4", "valid_ppl": "362", "valid_num_updates": "5", '
        '"valid_best_loss": "8.5"}'
    ]
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    assert series[EVAL_LOSS] == {5: pytest.approx(8.5 * np.log(2))}
    assert set(series[LOSS]) == set(range(1, 6))


def test_composer_console_evaluations_take_the_training_step_before_them(tmp_path: Path) -> None:
    # Composer's ConsoleLogger: `[Eval batch=B/N] Eval on eval data:` counts the evaluation
    # loader's batches; every evaluation was filed at step 10, the last three lost.
    lines = []
    for batch in range(10, 101, 10):
        lines += [
            f"[epoch=1][batch={batch}/100]:",
            f"\t Train loss/train/total: {3.0 - batch / 100:.4f}",
            "\t Train lr-DecoupledAdamW/group0: 0.0006",
        ]
        if batch % 50 == 0:
            lines += [f"[Eval batch={b}/10] Eval on eval data" for b in (1, 5, 10)]
            lines += [
                "[Eval batch=10/10] Eval on eval data:",
                f"\t Eval metrics/eval/LanguageCrossEntropy: {3.1 - batch / 100:.4f}",
            ]
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    assert series[EVAL_LOSS] == {50: pytest.approx(2.6), 100: pytest.approx(2.1)}
    assert set(series[LOSS]) == set(range(10, 101, 10))


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
    log = write_log(tmp_path, head + crafted + " " * 1_000_000 + "x\n" + head)
    outcome = run_tscope("analyze", log, "--out", tmp_path / "case", timeout=60)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


# ---- the review's findings (red-team of the reader, 2026-12-06) --------------------------------


def test_letters_that_fold_onto_a_step_key_are_no_step(tmp_path: Path) -> None:
    # `ſ` folds onto `s` and `ı` onto `i` under Unicode case folding: a traceback before.
    log = write_log(tmp_path, "ſtep 1 loss 2.0\nıter 2 loss 1.9\nİter 3 loss 1.8\n" * 3)
    assert not READER.can_read(log)


def test_a_per_epoch_step_counter_is_made_global(tmp_path: Path) -> None:
    """The PyTorch tutorial's `Epoch [e/5], Step [s/600], Loss: x` and `Epoch e | Batch b | …`
    restart their counter every epoch: all epochs are read, at global steps."""
    tutorial = "".join(
        f"Epoch [{e}/5], Step [{s}/600], Loss: {2.0 - e / 10 - s / 10_000:.4f}\n"
        for e in range(1, 6)
        for s in range(100, 700, 100)
    )
    series = series_in(write_log(tmp_path, tutorial, "tutorial.log"))
    assert sorted(series[LOSS]) == [
        (e - 1) * 600 + s for e in range(1, 6) for s in range(100, 700, 100)
    ]
    untotalled = "".join(
        f"Epoch {e} | Batch {b} | Loss {1.0 / (e + b):.4f}\n"
        for e in range(3)
        for b in (10, 20, 30)
    )
    series = series_in(write_log(tmp_path, untotalled, "batches.log"))
    assert sorted(series[LOSS]) == [10, 20, 30, 40, 50, 60, 70, 80, 90]


def test_a_global_step_beside_an_epoch_is_left_as_printed(tmp_path: Path) -> None:
    text = "".join(f"epoch {s // 100} step {s}/1000 loss {2.0:.1f}\n" for s in range(10, 400, 10))
    assert sorted(series_in(write_log(tmp_path, text))[LOSS]) == list(range(10, 400, 10))


@pytest.mark.parametrize(
    "other", ["aux loss", "z loss", "avg loss", "rank0 loss", "test loss", "packet loss"]
)
def test_another_loss_printed_first_is_not_the_training_loss(other: str, tmp_path: Path) -> None:
    text = "".join(
        f"step {s} | {other}: 0.01 | loss: {3.0 - s / 100:.3f} | lr 3e-4\n" for s in range(1, 20)
    )
    series = series_in(write_log(tmp_path, text))
    assert series[LOSS][5] == pytest.approx(2.95)


def test_min_lr_and_param_norm_are_not_the_lr_and_grad_norm(tmp_path: Path) -> None:
    text = "".join(f"step {s} | loss {2.0:.1f} | min lr 1e-5 | param norm 50.0\n" for s in range(9))
    series = series_in(write_log(tmp_path, text))
    assert LEARNING_RATE not in series and GRAD_NORM not in series


def test_evaluation_records_are_told_from_fields(tmp_path: Path) -> None:
    lines = [f"step {s} | loss {3.0:.1f} | val 3.20 | best val: n/a" for s in range(1, 6)]
    lines += ["Evaluation: step 5 | loss 2.5"]
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    assert series[LOSS] == {s: 3.0 for s in range(1, 6)}
    assert series[EVAL_LOSS] == {5: 2.5}


def test_thousands_separators_and_human_format_suffixes(tmp_path: Path) -> None:
    # nanotron's human_format prints `2.34K`; others print `1,204.51`.
    text = "".join(
        f"iteration: {s} | lm_loss: 2.34K | grad_norm: 1,204.51 | loss_scale: 65,536\n"
        for s in range(1, 6)
    )
    series = series_in(write_log(tmp_path, text))
    assert series[LOSS][3] == pytest.approx(2340.0)
    assert series[GRAD_NORM][3] == pytest.approx(1204.51)


def test_an_indented_block_after_a_full_step_line_is_not_its_record(tmp_path: Path) -> None:
    text = "step 0 | loss 3.0\n  optimizer:\n    lr: 0.0006\n" + "".join(
        f"step {s} | loss {3.0 - s / 10:.1f}\n" for s in range(1, 6)
    )
    assert LEARNING_RATE not in series_in(write_log(tmp_path, text))


def test_a_sentence_s_closing_dot_and_a_charset_escape(tmp_path: Path) -> None:
    text = "".join(
        f"\x1b(Bstep {s}: the loss was 2.5, loss: {2.0 + s / 10:.1f}.\n" for s in range(1, 6)
    )
    assert series_in(write_log(tmp_path, text))[LOSS][2] == pytest.approx(2.2)


def test_a_run_restarted_under_torchrun_keeps_its_unprefixed_steps(tmp_path: Path) -> None:
    """Steps 1-30 printed by a single process, then 31-60 by torchrun's ranks ([rank0]:,
    [rank1]:): rank 0's lines continue the unprefixed ones; rank 1's are left out."""
    text = "".join(f"step {s} | loss {3.0 - s / 100:.2f}\n" for s in range(1, 31))
    text += "".join(
        f"[rank{r}]:step {s} | loss {3.0 - s / 100 + r:.2f}\n"
        for s in range(31, 61)
        for r in (0, 1)
    )
    series = series_in(write_log(tmp_path, text))
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
    series = series_in(write_log(tmp_path, vision, "vision.log"))
    assert sorted(series[LOSS]) == [0, 100, 200, 300, 400, 500]
    assert series[LOSS][200] == pytest.approx(1.9)
    assert series[LEARNING_RATE][500] == pytest.approx(0.1)
    language = "".join(
        f"| epoch {e:3d} | {b:5d}/ 2983 batches | lr 20.00 | ms/batch 45.67 | "
        f"loss {7.0 - e / 10:5.2f} | ppl  2064.21\n"
        for e in (1, 2)
        for b in (200, 400)
    )
    series = series_in(write_log(tmp_path, language, "language.log"))
    assert sorted(series[LOSS]) == [200, 400, 3183, 3383]


# ---- the second review's findings (2026-12-06) ------------------------------------------------


def test_a_megabyte_of_digits_in_a_value_is_read_in_linear_time(tmp_path: Path) -> None:
    """`\\d+\\.?\\d*` split a run of n digits n ways: 20,000 digits took 16.8 s."""
    from hostile import run_tscope

    head = "".join(f"step {s} | loss: {3.0 - s / 100:.3f}\n" for s in range(1, 40))
    log = write_log(tmp_path, head + "step 50 | loss " + "1" * 1_000_000 + ".5.5\n" + head)
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
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    assert series[LOSS] == {s: pytest.approx(3.0 - s / 1000) for s in range(100, 1100, 100)}
    assert set(series[EVAL_LOSS].values()) == {2.5}  # the eval records; `val loss` fields first


def test_an_evaluation_counter_between_epochs_does_not_move_the_epochs(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 4):
        lines += [f"Epoch {e} | Batch {b} | Loss {2.0 / e:.3f}" for b in range(50, 550, 50)]
        lines.append(f"Epoch {e} | Validation | Batch 20 | Loss {1.9 / e:.3f}")
    series = series_in(write_log(tmp_path, "\n".join(lines)))
    assert sorted(series[LOSS]) == [
        (e - 1) * 500 + b for e in range(1, 4) for b in range(50, 550, 50)
    ]


def test_names_right_after_a_parenthesis_and_a_header_carrying_the_lr(tmp_path: Path) -> None:
    text = "".join(f"step {s} (loss: {2.0 + s / 100:.2f}, lr: 3e-4)\n" for s in range(1, 20))
    assert series_in(write_log(tmp_path, text, "paren.log"))[LOSS][5] == pytest.approx(2.05)
    header = "".join(
        f"Step {s}/200 | lr 3.00e-04\n    loss: {2.0 + s / 100:.2f}\n" for s in range(1, 20)
    )
    assert series_in(write_log(tmp_path, header, "header.log"))[LOSS][5] == pytest.approx(2.05)


def test_steps_with_thousands_separators(tmp_path: Path) -> None:
    text = "".join(f"Step {s:,}/5,000 | loss {2.0:.1f}\n" for s in range(100, 5000, 100))
    assert sorted(series_in(write_log(tmp_path, text))[LOSS]) == list(range(100, 5000, 100))


def test_a_resume_that_counts_the_epoch_up_is_not_a_new_epoch(tmp_path: Path) -> None:
    # A global step with its total, falling back from 3000 to 2000 at a resume that numbered the
    # epoch up: the steps stay as printed (the resume is the assembly's to see).
    text = "".join(f"epoch 1 step {s}/5000 loss 2.0\n" for s in range(100, 3100, 100))
    text += "".join(f"epoch 2 step {s}/5000 loss 2.0\n" for s in range(2000, 3100, 100))
    steps = sorted(series_in(write_log(tmp_path, text))[LOSS])
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
