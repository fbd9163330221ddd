"""A real Trainer run with `include_num_input_tokens_seen`: every training row of its
log_history then holds `train_runtime` and `train_tokens_per_second` besides `loss`. Those rows
were taken for the end-of-run summary and dropped, leaving "insufficient data" (a healthy-run
hunt of session 25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tscope.ingest.readers.trainer_state import TrainerStateReader
from tscope.pipeline import analyze_run

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    out = tmp_path_factory.mktemp("tokens-seen")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (64, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    arguments = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=48,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=2,
        include_num_input_tokens_seen=True,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data)
    trainer.train()
    trainer.save_state()  # OUT/trainer_state.json, as a user's script does
    return out


def test_every_training_row_is_read(counted_run):
    history = json.loads((counted_run / "trainer_state.json").read_text())
    rows = history["log_history"]
    assert all("train_runtime" in row for row in rows)  # the producer's shape this test is about
    read = TrainerStateReader().read(counted_run / "trainer_state.json", "trainer_state.json")
    names = set(read.metrics["original_name"])
    assert {"loss", "train_runtime"} & names == {"loss"}
    assert int((read.metrics["original_name"] == "loss").sum()) == 24


def test_the_run_is_analyzed(counted_run):
    case, _ = analyze_run(str(counted_run))
    assert case.summary.status != "insufficient_data"
