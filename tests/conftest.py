"""Shared pytest options: `pytest --update-golden` rewrites the golden files after review.

Property tests (hypothesis) run a fixed, reproducible set of cases by default, so CI is never red
by the luck of a draw; `HYPOTHESIS_PROFILE=explore pytest` draws fresh cases each run (run it
after touching a reader: that is how damaged-file bugs are found, then pinned with @example).
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The fast loop, `pytest -m "not slow"` (642 tests; 69 s user + 3 s sys of CPU in one process,
# 14 s of it collection, measured 2026-12-01 with `time` under load 14-20; the whole suite runs
# in scripts/check), leaves out these modules: each trains, replays, JIT-compiles, spawns
# processes or fuzzes, or took over ~4 s alone (`pytest --durations=0`), and the single tests
# below. CI and `scripts/check` run everything.
SLOW_MODULES = frozenset({
    "test_checkpoint_cases", "test_checkpoint_layouts", "test_checkpoint_readers",
    "test_checkpoint_safety", "test_checkpoint_stats", "test_tensor_stats", "test_cli",
    "test_cluster_pipeline",
    "test_demo_run", "test_examples", "test_hostile_checkpoints", "test_hostile_checkpoint_fuzz",
    "test_hostile_files",
    "test_hostile_parsers", "test_pelt_search", "test_reader_tensorboard",
    "test_reader_tensorboard_damaged", "test_realdata_cases",
    "test_render", "test_render_replay", "test_render_replay_payloads", "test_replay_attribution",
    "test_replay_bad_sample_rule", "test_replay_batch_outliers",
    "test_replay_core", "test_replay_pipeline", "test_replay_sharded", "test_remote",
    "test_xray", "test_xray_trainer", "test_xray_sft", "test_accuracy_bench",
    "test_checkpoint_controls", "test_replay_accumulation_run", "test_replay_lightning",
    "test_replay_seed_stream", "test_log_bullets", "test_generic_segments", "test_light_imports",
    "test_replay_judgement", "test_cluster_engines", "test_trainer_bullets",
    # They train runs in their module fixtures (nanoGPT producer, Trainer): 243, 157 and 69 s of
    # the fast loop's wall time under load ~19 (`--durations`, 2026-12-01).
    "test_cause_competition", "test_data_causes", "test_real_resume_bullet",
    # Tiny real transformers models stepped through the replay loop (their import alone, via
    # tests/replay_stats_models.py, was a quarter of the fast loop's collection), numba's JIT
    # compiling every kernel, and fuzzing: 15, 15 and 6 s of the fast loop under load 19.
    "test_replay_stats", "test_replay_stats_activations", "test_replay_stats_attention",
    "test_replay_stats_transfer", "test_replay_nonfinite", "test_compiled_loops",
    "test_parser_fuzz",
    # Train benchmark runs in their module fixtures (nanoGPT, Lightning, Trainer producers).
    "test_bad_batch_producers", "test_warmup_and_repetition_rules", "test_data_bumps",
})  # fmt: skip
SLOW_TESTS = frozenset(
    {
        "test_unstable_runs_split_by_how_they_failed_and_stable_runs_stay_out",
        "test_a_million_row_csv_reads_in_seconds",
        "test_arbitrary_text_raises_nothing_but_unreadable_input",
        "test_nan_steps_the_trainer_logged_as_zero_are_not_mismatches",
        "test_nan_steps_logged_as_zero_agree_when_replayed_as_on_another_cpu",
        "test_inputs_are_never_written",
        # Builds and installs a wheel (pip, a subprocess): 50 s of the fast loop under load 19.
        "test_wheel_holds_analyzers_and_templates_inside_tscope_and_runs",
        # 100 simulated series through the change-point search: 21 s under load 19.
        "test_a_stationary_grad_norm_with_spikes_rarely_gets_a_change_point",
        # test_lr_ramp's runs trained by the benchmark's nanoGPT producer (105 s under load 19);
        # its scheduler-only tests stay in the fast loop.
        "test_a_planted_ramp_is_found_at_its_first_step",
        "test_cyclic_and_restart_schedules_trained_for_real_stay_silent",
    }
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` the slow modules are not even imported (collection: 28.5 s of CPU
    before, 22.7 s after; the same 675 tests run)."""
    fast_loop = " ".join(str(config.getoption("markexpr", "")).split()) == "not slow"
    if fast_loop and collection_path.suffix == ".py" and collection_path.stem in SLOW_MODULES:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = pytest.mark.slow
    for item in items:
        module = Path(str(item.fspath)).stem
        name = getattr(item, "originalname", item.name)
        if module in SLOW_MODULES or name in SLOW_TESTS:
            item.add_marker(slow)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite tests/golden/ from the current output instead of comparing against it.",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def analyzed_trainer_run() -> Callable[[str], Any]:
    """`tscope.analyze` of a Trainer fixture run (fixtures/data/trainer/<name>), computed once per
    session for every module that asks for the same run; each caller gets its own deep copy (a
    Case is mutable, a test may change what it was handed)."""
    import tscope

    analyzed: dict[str, Any] = {}

    def case_of(name: str) -> Any:
        if name not in analyzed:
            analyzed[name] = tscope.analyze(FIXTURES_DIR / "data" / "trainer" / name)
        return copy.deepcopy(analyzed[name])

    return case_of


@pytest.fixture(scope="session")
def local_trainer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short Trainer run made on this machine, once per test session: the only run a test may
    expect a replay to reproduce bit for bit (see tests/any_cpu.py)."""
    from any_cpu import LOCAL_RUN_NAME, LOCAL_RUN_SAVE_STEPS, LOCAL_RUN_STEPS

    if str(FIXTURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIXTURES_DIR))
    from local_trainer_run import train_locally

    run_dir = tmp_path_factory.mktemp("local-trainer-run") / LOCAL_RUN_NAME
    return train_locally(LOCAL_RUN_NAME, run_dir, LOCAL_RUN_STEPS, LOCAL_RUN_SAVE_STEPS)


@pytest.fixture(scope="session")
def byte_llama_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two healthy Trainer runs of a tiny untied byte-level Llama with checkpoints (issue 11's
    controls): a short warm-up (checkpoints every 15 steps) and a gentle one (40 of 60 steps,
    checkpoints every 10). Trained once per session, ~10 s each."""
    if str(FIXTURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIXTURES_DIR))
    from byte_llama_run import train_byte_llama

    root = tmp_path_factory.mktemp("byte-llama")
    return {
        "short_warmup": train_byte_llama(root / "short_warmup", 60, 15, warmup=10),
        "gentle_warmup": train_byte_llama(root / "gentle_warmup", 60, 10, warmup=40),
    }
