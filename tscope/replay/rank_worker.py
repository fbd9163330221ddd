"""One rank of a sharded replay (launched by tscope.sharded_replay_pipeline through torch.distributed.run).

    python -m torch.distributed.run --nproc_per_node 2 -m tscope.replay.rank_worker SPEC.json

SPEC.json is what sharded.prepare() planned, plus `out`, a scratch folder: rank 0 writes
result.json there (the global records), a rank that fails writes error-RANK.txt (one line).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tscope.errors import TscopeError
from tscope.output_files import write_text


def init_group(device: str) -> bool:
    """Join (or create) the process group torchrun describes; True when created here."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    cuda = device in ("cuda", "auto") and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    return True


def run_rank(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Restore this rank's shard, replay the window; rank 0 returns the global result."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from tscope.replay.determinism import replay_settings
    from tscope.replay.entry import load_entry
    from tscope.replay.losses import DEFAULT_CAUSAL_LM, ENTRY_LOSS
    from tscope.replay.rng import caller_rng_preserved, max_dropout, rng_fingerprint
    from tscope.replay.sharded_loop import ShardedSettings, run_sharded_steps
    from tscope.replay.sharded_restore import restore_sharded

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    entry = load_entry(spec["entry"])
    mesh = init_device_mesh(device.type, (world,))
    with (
        replay_settings(device.type, relaxed=not spec["deterministic"]) as settings_report,
        caller_rng_preserved(device.type),
    ):
        restored = restore_sharded(Path(spec["checkpoint"]), spec["shown"], entry, mesh, device)
        settings = ShardedSettings(
            device=device,
            loss_path=ENTRY_LOSS if entry.loss_fn is not None else DEFAULT_CAUSAL_LM,
            max_grad_norm=spec["max_grad_norm"],
            group_lrs={int(s): tuple(v) for s, v in spec["group_lrs"].items()},
            watched=frozenset(spec["watched"]),
            rank=rank,
            world_size=world,
        )
        before = rng_fingerprint(device.type)
        records, skipped = run_sharded_steps(
            restored.model, restored.optimizer, entry, spec["first"], spec["last"], settings
        )
        consumed = rng_fingerprint(device.type) != before
    if rank != 0:
        return None
    backend = dist.get_backend()
    return {
        "records": records,
        "skipped": skipped,
        "optimizer_restored": restored.optimizer_restored,
        "rng_consumed": consumed,
        "dropout": max_dropout(restored.model),
        "loss_path": settings.loss_path,
        "notes": [
            f"sharded replay: {world} ranks ({backend}), each restoring and training its own shard",
            "sample indices count the global batch in rank order (rank 0's rows, then rank 1's, …)",
            *settings_report.notes,
            *restored.notes,
        ],
        "caveats": [
            *settings_report.caveats,
            *restored.caveats,
            f"{spec['shown']} holds no RNG state: random draws (dropout) are not the run's (a "
            "model without dropout is unaffected)",
        ],
    }


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    out = Path(spec["out"])
    rank = os.environ.get("RANK", "0")
    try:
        created = init_group(spec["device"])
        try:
            result = run_rank(spec)
            if created:
                # Every rank past its last collective before any tears the group down: a rank
                # that destroyed its gloo sockets while the other still had traffic in flight
                # aborted the other (SIGABRT on rank 1, twice in CI on a loaded machine).
                import torch.distributed as dist

                dist.barrier()
        finally:
            if created:
                import torch.distributed as dist

                dist.destroy_process_group()
    except TscopeError as error:
        write_text(out / f"error-{rank}.txt", str(error) + "\n")
        return 2
    if result is not None:
        write_text(out / "result.json", json.dumps(result, allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
