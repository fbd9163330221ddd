"""Training text for the demo: docstrings of a fixed list of standard-library modules.

Real English prose that every Python install carries, read from the `.py` sources with `ast`
(nothing is imported, and `python -OO` cannot strip it). Tokens are characters.

    corpus = load_corpus()
    inputs, targets = corpus.batch("train", index=7, seed=0, batch_size=16, block_size=64)

Batches are a pure function of (stream, index, seed): a replay can rebuild the batch of any
optimizer step without fast-forwarding a global random generator.
"""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from tscope.errors import TscopeError

# Pure-Python modules with long, prose-like docstrings (~280k characters, 96 distinct, on CPython 3.11).
STDLIB_SOURCES = (
    "textwrap.py",
    "argparse.py",
    "json/__init__.py",
    "random.py",
    "collections/__init__.py",
    "functools.py",
    "heapq.py",
    "fractions.py",
    "difflib.py",
    "statistics.py",
    "calendar.py",
    "enum.py",
    "contextlib.py",
    "typing.py",
    "inspect.py",
    "logging/__init__.py",
    "threading.py",
    "ipaddress.py",
    "email/message.py",
    "urllib/parse.py",
    "subprocess.py",
)
# Below this, a 300-step demo (16×64 tokens a step) would pass over the text 3+ times.
MIN_CORPUS_CHARS = 100_000
VAL_FRACTION = 0.1  # nanoGPT's shakespeare_char split: last 10 % of the text is validation
# Where batches come from: "train" is the batch of optimizer step `index`; the eval streams hold
# the fixed batches every evaluation averages over (the same ones each time, so evals compare).
BatchStream = Literal["train", "eval_train", "eval_val"]
_STREAM_NUMBER: dict[str, int] = {"train": 0, "eval_train": 1, "eval_val": 2}
_SEED_MASK = (1 << 63) - 1  # torch.Generator.manual_seed takes a non-negative 64-bit seed


def _docstrings_of(source: str) -> list[str]:
    """Module, class and function docstrings in breadth-first order (ast.walk's, deterministic)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node)
            if text:
                found.append(text)
    return found


def _keep_plain_ascii(text: str) -> str:
    """Printable ASCII and newlines only: a ~96-character vocabulary; tabs become 4 spaces."""
    text = text.replace("\t", "    ")
    return "".join(ch for ch in text if ch == "\n" or " " <= ch <= "~")


def docstring_text(stdlib_dir: Path | None = None) -> str:
    """The concatenated docstrings of STDLIB_SOURCES found under stdlib_dir (default: this Python's).

    Modules missing from the install (frozen, or a trimmed distribution) are skipped; too little
    text overall is an error.
    """
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    pieces: list[str] = []
    for relative in STDLIB_SOURCES:
        path = root / relative
        try:
            source = path.read_text(encoding="utf-8")
        except OSError:
            continue
        pieces.extend(_keep_plain_ascii(doc) for doc in _docstrings_of(source))
    text = "\n\n".join(pieces)
    if len(text) < MIN_CORPUS_CHARS:
        raise TscopeError(
            f"The demo corpus is built from standard-library docstrings under {root}, but only "
            f"{len(text):,} characters were found (need {MIN_CORPUS_CHARS:,}). "
            "Run tscope demo with a full CPython install that ships its .py sources."
        )
    return text


@dataclass(frozen=True)
class CharVocabulary:
    chars: str  # sorted distinct characters; token id = position in this string

    @classmethod
    def from_text(cls, text: str) -> CharVocabulary:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        index = {ch: i for i, ch in enumerate(self.chars)}
        return torch.tensor([index[ch] for ch in text], dtype=torch.long)  # (len(text),)

    def decode(self, tokens: torch.Tensor) -> str:
        return "".join(self.chars[int(t)] for t in tokens.flatten())


@dataclass(frozen=True)
class Corpus:
    vocabulary: CharVocabulary
    train_tokens: torch.Tensor  # (n_train,) int64 character ids
    val_tokens: torch.Tensor  # (n_val,) int64 character ids

    def batch(
        self, stream: BatchStream, *, index: int, seed: int, batch_size: int, block_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-character targets, each (batch_size, block_size) int64.

        Random windows as nanoGPT's get_batch draws them, but from a generator seeded by
        (seed, stream, index) instead of the global one. Only "eval_val" reads the val split.
        """
        tokens = self.val_tokens if stream == "eval_val" else self.train_tokens
        if len(tokens) <= block_size:
            raise ValueError(f"{stream} has {len(tokens)} tokens to draw from, need > {block_size}")
        mixed = ((seed * len(_STREAM_NUMBER) + _STREAM_NUMBER[stream]) * 1_000_003) + index
        generator = torch.Generator().manual_seed(mixed & _SEED_MASK)
        starts = torch.randint(len(tokens) - block_size, (batch_size,), generator=generator)
        inputs = torch.stack([tokens[s : s + block_size] for s in starts.tolist()])  # (B, T)
        targets = torch.stack([tokens[s + 1 : s + 1 + block_size] for s in starts.tolist()])
        return inputs, targets  # (B, T), (B, T)


def load_corpus(stdlib_dir: Path | None = None) -> Corpus:
    """The docstring corpus, char-tokenized, first 90 % for training and the rest for validation."""
    text = docstring_text(stdlib_dir)
    vocabulary = CharVocabulary.from_text(text)
    tokens = vocabulary.encode(text)  # (len(text),)
    split_at = int(len(tokens) * (1 - VAL_FRACTION))
    return Corpus(vocabulary, tokens[:split_at], tokens[split_at:])
