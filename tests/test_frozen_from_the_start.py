"""A real Trainer run fine-tuning only the upper layers (embeddings and layer 0 set
requires_grad=False before training): the Trainer builds its optimizer from the trainable
parameters only, so optimizer.pt holds state for exactly the tensors that move, and its ids do
not map to names (the mapping expects every parameter). That freeze is intended; the case said
"the checkpoints hold no optimizer state, so an intentional freeze cannot be told from a defect"
and warned (a healthy-run hunt of session 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tscope.pipeline import analyze_run

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def partly_frozen_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    out = tmp_path_factory.mktemp("partly-frozen")
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    model = transformers.GPTNeoXForCausalLM(config)
    for name, parameter in model.named_parameters():
        if name.startswith("gpt_neox.embed_in") or ".layers.0." in name:
            parameter.requires_grad = False
    ids = torch.randint(0, 64, (96, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    arguments = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=36,
        per_device_train_batch_size=4,
        learning_rate=2e-3,
        logging_steps=1,
        save_steps=12,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    transformers.Trainer(model=model, args=arguments, train_dataset=data).train()
    return out


def test_a_base_frozen_from_the_start_is_an_intended_freeze(partly_frozen_run):
    case, _ = analyze_run(str(partly_frozen_run))
    frozen = [f for f in case.findings if f.category == "frozen_parameters"]
    assert frozen, [f.category for f in case.findings]
    assert frozen[0].severity == "info"
    assert "exactly the tensors that moved" in frozen[0].message
    assert "gpt_neox.embed_in.weight" in frozen[0].evidence["frozen_tensors"]


def test_a_freeze_seen_in_every_window_is_dated_at_the_first_checkpoint(partly_frozen_run):
    """Unchanged from the first checkpoint on, the freeze predates it: dated there, not at the
    last checkpoint (a blind set's Lightning run frozen from step 0 read "at step 400" of a
    run checkpointed every 100 steps, session 28)."""
    case, _ = analyze_run(str(partly_frozen_run))
    frozen = next(f for f in case.findings if f.category == "frozen_parameters")
    assert frozen.step == 12
