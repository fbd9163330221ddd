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


# The fast loop, `pytest -m "not slow" -n 2` (docs/contributing.md: 669 tests, ~38 s wall on two
# cores; in one process ~57 s of CPU, 10 s of it collection), leaves out these modules: each
# trains, replays, JIT-compiles, spawns processes or fuzzes, or took over ~4 s alone
# (`pytest --durations=0`), and the single tests below. CI and `scripts/check` run everything.
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
    "test_short_repetition_and_late_break",  # trains a Lightning and a Trainer run
    # Tiny real transformers models stepped through the replay loop (their import alone, via
    # tests/replay_stats_models.py, was a quarter of the fast loop's collection), numba's JIT
    # compiling every kernel, and fuzzing: 15, 15 and 6 s of the fast loop under load 19.
    "test_replay_stats", "test_replay_stats_activations", "test_replay_stats_attention",
    "test_replay_stats_transfer", "test_replay_nonfinite", "test_compiled_loops",
    "test_parser_fuzz",
    # Train benchmark runs in their module fixtures (nanoGPT, Lightning, Trainer producers).
    "test_bad_batch_producers", "test_warmup_and_repetition_rules", "test_data_bumps",
    "test_ood_runs",
    # The Trainer fixture runs analyzed with their checkpoints' weights (analyzed_trainer_run):
    # 83 s wall of the fast loop's 8:13 under load ~19, most of it importing transformers for
    # the optimizer's parameter order.
    "test_fixture_runs", "test_render_first_screen",
    # Red-team wave 2: crafted files through the CLI in child processes (one decodes a 40 MB
    # .metadata to its 1.3 GB budget), and transformers imported to see that it is never asked to run a config's code.
    "test_hostile_pickle_values", "test_hostile_side_files", "test_hostile_log_lines",
    "test_hostile_extreme_values", "test_hostile_replay_config",
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
        # The fast loop's longest single tests left (`--durations=40`, 2026-12-02, under load
        # ~10: 86 s of CPU in 10:14 wall, so about a seventh of each wall time is its CPU):
        # the safetensors scan against torch on every tensor (42 s wall, all parameters), the
        # sigma audit over every planted run (23 s), the healthy checkpoint controls (17 s), the
        # CUSUM excursion scan (13 s), the real-log folders grouped and refused (20 s together),
        # torch's metadata reader (7 s), a trainscope recording (7 s), the cluster settings
        # (7 s), a Pythia table (7 s) and the real runs' LR configs (6.5 s).
        "test_scan_equals_the_torch_path_for_every_tensor",
        "test_the_audit_covers_spikes_of_both_series",
        "test_healthy_checkpoints_raise_nothing",
        "test_a_downward_excursion_is_reported_downward_up_to_the_next_change",
        "test_the_176b_prequel_and_chronicles_are_one_run_and_pythia_segments_too",
        "test_a_folder_of_unrelated_real_runs_is_refused_naming_them",
        "test_torchs_own_metadata_reader_would_have_run_it",
        "test_the_recording_alone_is_a_run_with_global_layer_and_routing_series",
        "test_each_cluster_is_explained_by_its_own_setting",
        "test_pythia_14m_seed5_keeps_the_one_step_spike_at_95457",
        "test_real_runs_are_told_apart_and_their_lrs_are_typical",
        # The next longest after those (same run, 66 s of CPU in 8:13 wall under load ~19):
        # every real DCP metadata file against torch's reader (23 s wall), damaged metadata
        # (13 s), the cluster counterexample (17 s), the LR-jump checkpoint windows (12 s).
        "test_the_metadata_parser_reads_every_real_metadata_file_as_torch_does",
        "test_damaged_metadata_is_unreadable_input_or_still_a_checkpoint",
        "test_the_counterexample_is_the_stable_run_one_setting_away",
        "test_lr_jump_window_shows_as_update_ratio_high_naming_the_layers",
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


# Every what-if the corrupted_batch replay tests judge (test_render_replay: skip and lr=0.5, its
# goldens; test_replay_pipeline: all three): replayed once per session, judged per module.
CORRUPTED_BATCH_WHAT_IFS = ("skip", "from=60", "lr=0.5")


@pytest.fixture(scope="session")
def corrupted_batch_replays() -> Any:
    """`tscope replay corrupted_batch --around 145` with CORRUPTED_BATCH_WHAT_IFS, its replays
    (tscope.replay_pipeline.Replays): `judged(replays, what_ifs)` gives the investigation of any
    of them, as `investigate(..., what_ifs=...)` would."""
    from tscope.replay_pipeline import investigate

    run = FIXTURES_DIR / "data" / "trainer" / "corrupted_batch"
    entry = FIXTURES_DIR / "entries" / "trainer_fixtures.py"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
        return investigate(run, 145, entry, what_ifs=CORRUPTED_BATCH_WHAT_IFS).replays
