"""A freeze with no optimizer state is intended when it follows the architecture, a defect when
it is irregular: a blind set's Llama loop (session 29) built its parameter groups with a name
filter that missed layers.1.self_attn, so those four projections never trained while the same
projections in layers 0 and 2, and layer 1's MLP, did. The case called it an info note "as
intended" and the run healthy. Real Trainer runs here: the Trainer builds its optimizer from the
parameters with requires_grad only, as such a filter would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tscope.pipeline import analyze_run

transformers = pytest.importorskip("transformers")


def _trained(out: Path, frozen: Callable[[str], bool]) -> Path:
    import torch

    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    model = transformers.GPTNeoXForCausalLM(config)
    for name, parameter in model.named_parameters():
        if frozen(name):
            parameter.requires_grad = False
    ids = torch.randint(0, 64, (96, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    arguments = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=24,
        per_device_train_batch_size=4,
        learning_rate=2e-3,
        logging_steps=1,
        save_steps=8,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    transformers.Trainer(model=model, args=arguments, train_dataset=data).train()
    return out


def _frozen_finding(run: Path):  # type: ignore[no-untyped-def]
    case, _ = analyze_run(str(run))
    frozen = [f for f in case.findings if f.category == "frozen_parameters"]
    assert len(frozen) == 1, [f.category for f in case.findings]
    return frozen[0]


def test_one_blocks_attention_frozen_while_its_siblings_train_is_a_warning(tmp_path: Path) -> None:
    run = _trained(tmp_path / "run", lambda name: ".layers.1.attention." in name)
    finding = _frozen_finding(run)
    assert finding.severity == "warning"
    assert "a freeze this irregular is rarely intended" in finding.message
    assert finding.evidence["intentional"] is False
    assert all(".layers.1.attention." in name for name in finding.evidence["frozen_tensors"])


def test_the_same_tensor_frozen_in_every_block_is_intended(tmp_path: Path) -> None:
    """LoRA's pattern: one kind of weight frozen throughout (here the attention's output
    projection; its weight's shape is in no optimizer entry, so only its bias is analyzed)."""
    run = _trained(tmp_path / "run", lambda name: "attention.dense" in name)
    finding = _frozen_finding(run)
    assert finding.severity == "info"
    assert "as intended" in finding.message


def test_the_first_block_frozen_whole_is_intended(tmp_path: Path) -> None:
    run = _trained(tmp_path / "run", lambda name: ".layers.0." in name)
    assert _frozen_finding(run).severity == "info"
