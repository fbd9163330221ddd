"""A real Trainer run resumed with ignore_data_skip=True: the data loader starts its epoch over,
so the run trains again on data it has seen while the step counts on. Only the logged epoch
shows it (it goes back); the case said nothing of the resume (a planted-cause hunt of
session 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tscope.pipeline import analyze_run

transformers = pytest.importorskip("transformers")


def _train(out: Path, max_steps: int, resume: str | None, ignore_data_skip: bool) -> None:
    import torch

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (40, 16), generator=generator)
    data = [{"input_ids": row, "labels": row} for row in ids]
    arguments = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_steps=15,
        ignore_data_skip=ignore_data_skip,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data)
    trainer.train(resume_from_checkpoint=resume)


@pytest.fixture(scope="module")
def rewound_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rewound")
    _train(out, 20, None, False)  # "crashes" after step 20; checkpoint-15 is the last saved
    _train(out, 30, str(out / "checkpoint-15"), True)
    return out


def test_the_data_loader_starting_over_at_a_resume_is_reported(rewound_run):
    case, _ = analyze_run(str(rewound_run))
    resumes = [f for f in case.findings if f.category == "resume_discontinuity"]
    assert resumes and resumes[0].step == 16
    assert resumes[0].severity == "warning"
    assert "data loader started over" in resumes[0].message
    assert "about 5 steps of data seen again" in resumes[0].message


def test_a_resume_that_skips_to_its_data_position_says_nothing_of_it(tmp_path):
    _train(tmp_path, 20, None, False)
    _train(tmp_path, 30, str(tmp_path / "checkpoint-15"), False)
    case, _ = analyze_run(str(tmp_path))
    assert not any("data loader" in f.message for f in case.findings)
    assert all(f.severity == "info" for f in case.findings if f.category == "resume_discontinuity")


def test_a_forged_epoch_that_goes_back_at_every_row_is_bounded(tmp_path):
    import json

    rows = [
        {
            "step": step,
            "epoch": 1.0 + (0.5 if step % 2 else 0.0),
            "loss": 2.0,
            "learning_rate": 1e-3,
        }
        for step in range(1, 20_001)
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
    case, _ = analyze_run(str(tmp_path))
    resumes = [f for f in case.findings if f.category == "resume_discontinuity"]
    assert len(resumes) <= 20
    assert any("goes back 10000 times" in p.problem for p in case.partial)
