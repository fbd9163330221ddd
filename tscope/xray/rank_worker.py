"""One rank of a data-parallel Trainer step on the tracer (launched by torchrun, gloo on CPU).

    python -m torch.distributed.run --nproc_per_node 2 -m tscope.xray.rank_worker SPEC.json

SPEC.json: {"settings": TrainerSettings fields, "lengths": [...], "out": folder}. Every rank
writes rank-R.pt with its forwards; rank 0 also the embedding gradient after the all-reduce.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    import torch

    from tscope.xray.probe import make_probe
    from tscope.xray.tracer import build_tracer
    from tscope.xray.trainer_step import TrainerSettings, trainer_step_gradient

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    settings = TrainerSettings(**spec["settings"])
    probe = make_probe(spec["lengths"])
    model = build_tracer(probe.vocab_size, "weighting")
    gradient, calls = trainer_step_gradient(settings, model, probe.copy_sequences())
    rank = int(os.environ.get("RANK", "0"))
    record = {"calls": [[c.token_ids, c.scored_labels] for c in calls]}
    if rank == 0:
        record["gradient"] = gradient
    torch.save(record, Path(spec["out"]) / f"rank-{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
