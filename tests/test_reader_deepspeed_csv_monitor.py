"""DeepSpeed's CSV monitor, read from files the real DeepSpeed engine wrote.

fixtures/data/deepspeed_monitor/ (fixtures/make_deepspeed_monitor_logs.py): DeepSpeed 0.19.8 on
CPU, batch 16, the LR ×20 from step 120, with its TensorBoard and CSV monitors on. Both write
`Train/Samples/lr` against the samples consumed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tscope.ingest.readers.deepspeed_csv_monitor import DeepSpeedCsvMonitorReader
from tscope.pipeline import analyze_run

MONITOR = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "deepspeed_monitor"
CSV = MONITOR / "csv" / "ds" / "Train_Samples_lr.csv"


def test_the_monitors_lr_is_read_on_deepspeeds_step_axis():
    read = DeepSpeedCsvMonitorReader().read(CSV, "Train_Samples_lr.csv")
    table = read.metrics
    assert set(table.metric.labels) == {"train/learning_rate"}
    assert list(table.original_name.labels) == ["Train/Samples/lr"]
    assert table.step.tolist() == list(range(1, 241))  # samples 16, 32, ... / 16
    values = table.value
    assert np.isclose(values[-1] / values[118], 20.0)  # after step 120 vs before
    assert [c.kind for c in read.caveats] == ["samples_axis"]
    assert "samples / 16" in read.caveats[0].message


def test_the_csv_alone_and_beside_the_tensorboard_monitor_date_the_jump_at_the_same_step():
    for folder in (MONITOR / "csv", MONITOR):
        case = analyze_run(folder).case
        jumps = [f for f in case.findings if f.category == "lr_schedule_jump"]
        assert [f.step for f in jumps] == [120], folder
        assert case.metrics == ["train/learning_rate"]


def test_other_tables_are_not_claimed(tmp_path):
    renamed = tmp_path / "Train_Samples_lr.csv"
    renamed.write_text("iteration,lr\n1,0.1\n2,0.1\n")
    assert not DeepSpeedCsvMonitorReader().can_read(renamed)
    other = tmp_path / "lr.csv"
    shutil.copy(CSV, other)
    assert not DeepSpeedCsvMonitorReader().can_read(other)


def test_samples_without_one_batch_spacing_stay_samples_and_say_so(tmp_path):
    ramp = tmp_path / "Train_Samples_lr.csv"
    ramp.write_text("step,lr\n8,0.1\n24,0.1\n56,0.1\n")  # a batch-size ramp: 8, 16, 32
    read = DeepSpeedCsvMonitorReader().read(ramp, "Train_Samples_lr.csv")
    assert read.metrics.step.tolist() == [8, 24, 56]
    assert "their steps are sample counts" in read.caveats[0].message
