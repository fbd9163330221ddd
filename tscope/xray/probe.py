"""The probe batch: sequences whose every token has its own id, and where each target sits.

    probe = make_probe((5, 9, 3, 12, 7, 4))
    probe.sequences[0]  # {"input_ids": [16, 17, 18, 19, 20], "labels": [16, 17, 18, 19, 20]}

`labels = input_ids` as a causal LM's data pipeline gives them; the model shifts them, so target
k (k ≥ 1) of a sequence is predicted at position k−1 and its gradient lands on the embedding row
of input token k−1. A sequence of n tokens has n−1 targets; its last token predicts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tscope.errors import UsageError
from tscope.xray.tracer import TOKEN_ID_OFFSET

DEFAULT_LENGTHS = (5, 9, 3, 12, 7, 4)  # uneven on purpose: every closed-form rule differs
MIN_LENGTH = 2  # one target needs two tokens
MAX_PROBE_TOKENS = 4096  # a probe, not a dataset: seconds on CPU


@dataclass(frozen=True)
class Target:
    sequence: int
    position: int  # index of the target token within its sequence (≥ 1)
    row: int  # embedding row that receives its gradient: the id of input token position-1


@dataclass(frozen=True)
class Probe:
    lengths: tuple[int, ...]
    sequences: tuple[dict[str, list[int]], ...]
    targets: tuple[Target, ...]
    vocab_size: int

    def rows_of(self, sequence: int) -> list[int]:
        """Every embedding row of one sequence's tokens."""
        return list(self.sequences[sequence]["input_ids"])

    def last_rows(self) -> list[int]:
        """Each sequence's last token: it predicts no target of its own sequence."""
        return [seq["input_ids"][-1] for seq in self.sequences]

    def copy_sequences(self, labelled: int | None = None) -> list[dict[str, list[int]]]:
        """Fresh lists for the user's step; with `labelled`, every other sequence is -100."""
        copies = []
        for index, seq in enumerate(self.sequences):
            labels = list(seq["labels"])
            if labelled is not None and index != labelled:
                labels = [-100] * len(labels)
            copies.append({"input_ids": list(seq["input_ids"]), "labels": labels})
        return copies


def parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"--lengths {text!r}: give comma-separated integers, e.g. 5,9,3,12."
        ) from None
    check_lengths(lengths, f"--lengths {text!r}")
    return lengths


def check_lengths(lengths: Sequence[int], shown: str) -> None:
    if not lengths:
        raise UsageError(f"{shown}: give at least one sequence length.")
    if any(n < MIN_LENGTH for n in lengths):
        raise UsageError(f"{shown}: every sequence needs at least {MIN_LENGTH} tokens.")
    if sum(lengths) > MAX_PROBE_TOKENS:
        raise UsageError(f"{shown}: at most {MAX_PROBE_TOKENS} tokens in all.")


def make_probe(lengths: Sequence[int]) -> Probe:
    check_lengths(lengths, "lengths")
    sequences: list[dict[str, list[int]]] = []
    targets: list[Target] = []
    next_id = TOKEN_ID_OFFSET
    for index, length in enumerate(lengths):
        ids = list(range(next_id, next_id + length))
        next_id += length
        sequences.append({"input_ids": ids, "labels": list(ids)})
        targets.extend(Target(index, k, ids[k - 1]) for k in range(1, length))
    return Probe(tuple(lengths), tuple(sequences), tuple(targets), vocab_size=next_id + 1)


def cycled_lengths(lengths: Sequence[int], count: int) -> tuple[int, ...]:
    """`count` lengths, repeating `lengths`: a Trainer step may need more sequences than given."""
    return tuple(lengths[i % len(lengths)] for i in range(count))


def row_owner(probe: Probe) -> dict[int, Any]:
    """row id -> (sequence, position) for every probe token."""
    owner: dict[int, Any] = {}
    for index, seq in enumerate(probe.sequences):
        for position, row in enumerate(seq["input_ids"]):
            owner[row] = (index, position)
    return owner
