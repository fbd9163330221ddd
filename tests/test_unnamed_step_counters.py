"""An optimizer's step counters are read whether or not its entries could be named
(tscope/ingest/checkpoints/optimizer_mapping.py, OptimizerState.largest_step). A fresh
verification run (session 26): a plain loop's Adagrad, reset at a resume at 1200, held counters
of 400 at checkpoint 1600; its entries were not mapped to names, so no counter was read and the
reset went unseen."""

from __future__ import annotations

import torch

from tscope.ingest.checkpoints.optimizer_mapping import map_optimizer_state


def test_counters_of_entries_that_cannot_be_named_are_still_read():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
    state, how = map_optimizer_state(optimizer.state_dict(), orders=[], rules=[])
    assert how == "not mapped" and state.per_param == {}
    assert state.largest_step == 3.0
