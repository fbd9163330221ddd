"""The links the wandb client makes in every run folder (wandb/latest-run, wandb/debug.log,
wandb/debug-internal.log, a run's logs/debug-core.log) are never followed, like every link, but
they are not missing data: a new user's every W&B run read "partial" because of them. Any other
link is still listed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tscope.pipeline import analyze_run

RECORDED = Path(__file__).resolve().parent / "data" / "wandb_offline" / "run-c1kgp2xt.wandb"


def _wandb_folder(root: Path) -> Path:
    run = root / "wandb" / "offline-run-20261207_022444-c1kgp2xt"
    (run / "logs").mkdir(parents=True)
    shutil.copy(RECORDED, run / RECORDED.name)
    (run / "logs" / "debug.log").write_text("wandb debug\n")
    (run / "logs" / "debug-internal.log").write_text("wandb internal\n")
    (root / "wandb" / "latest-run").symlink_to(run.name)
    (root / "wandb" / "debug.log").symlink_to(f"{run.name}/logs/debug.log")
    (root / "wandb" / "debug-internal.log").symlink_to(f"{run.name}/logs/debug-internal.log")
    (run / "logs" / "debug-core.log").symlink_to("/nonexistent/wandb/logs/core-debug.log")
    return root


def test_wandbs_own_links_do_not_make_the_run_partial(tmp_path: Path) -> None:
    case, run = analyze_run(_wandb_folder(tmp_path / "run"))
    assert [s.kind for s in run.sources] == ["wandb_offline"]
    assert case.partial == []


def test_another_link_is_still_listed(tmp_path: Path) -> None:
    root = _wandb_folder(tmp_path / "run")
    (root / "notes.txt").symlink_to("/etc/hostname")
    case, _ = analyze_run(root)
    assert [entry.path for entry in case.partial] == ["notes.txt"]
