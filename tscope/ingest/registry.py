"""The explicit list of readers. Discovery asks them in this order; the first that can read wins."""

from __future__ import annotations

from tscope.ingest.base import Reader
from tscope.ingest.readers.deepspeed_csv_monitor import DeepSpeedCsvMonitorReader
from tscope.ingest.readers.llmc_log import LlmcLogReader
from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.ingest.readers.metrics_table import MetricsTableReader
from tscope.ingest.readers.mlflow_files import MlflowRunReader
from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader
from tscope.ingest.readers.nanogpt_log import ModdedNanoGPTLogReader, NanoGPTLogReader
from tscope.ingest.readers.step_lines import StepLineLogReader
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.ingest.readers.tensorboard_csv import TensorBoardCsvReader
from tscope.ingest.readers.trainer_state import TrainerStateReader
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader
from tscope.ingest.readers.trainscope_run import TrainscopeRunReader
from tscope.ingest.readers.wandb_export import WandbExportReader
from tscope.ingest.readers.wandb_history import WandbHistoryReader
from tscope.ingest.readers.wandb_offline import WandbOfflineReader

READERS: tuple[Reader, ...] = (
    TrainerStateReader(),
    TensorBoardReader(),
    TrainscopeRunReader(),
    WandbOfflineReader(),
    WandbExportReader(),
    WandbHistoryReader(),
    MlflowRunReader(),
    MlflowSqliteReader(),
    MegatronLogReader(),
    ModdedNanoGPTLogReader(),
    NanoGPTLogReader(),
    LlmcLogReader(),
    TrainerStdoutReader(),
    # After every producer's own text reader: it claims any log of `step N … loss: X` lines.
    StepLineLogReader(),
    TensorBoardCsvReader(),
    DeepSpeedCsvMonitorReader(),  # before the generic table: its steps are sample counts
    # Last: it claims any table with a step column, so every specific reader asks first.
    MetricsTableReader(),
)
