"""Harness for the hostile-input tests: run the real CLI in a child process under limits.

Each hostile test builds its crafted files at test time, runs `tscope …` through `run_tscope`
(address-space and CPU limits, a wall-clock timeout, no inherited stdin) and asserts the promises
of docs/security.md with the helpers below.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Enough for torch + pandas to import and read a tiny run; far below what the crafted files ask.
MEMORY_LIMIT_BYTES = 3 * 1024**3
WALL_SECONDS = 120


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def assert_no_traceback(self) -> None:
        assert "Traceback (most recent call last)" not in self.stderr, self.stderr[-3000:]
        assert self.returncode not in (-9, -11, 137, 139), (self.returncode, self.stderr[-2000:])

    def assert_one_line_error(self, *fragments: str) -> None:
        """Exit 2 with one line on stderr that names what went wrong."""
        self.assert_no_traceback()
        assert self.returncode == 2, (self.returncode, self.stderr[-2000:])
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, self.stderr
        for fragment in fragments:
            assert fragment in lines[0], lines[0]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (WALL_SECONDS, WALL_SECONDS))


def run_tscope(
    *args: str | Path, cwd: Path | None = None, timeout: float = WALL_SECONDS
) -> Outcome:
    """`python -m tscope ARGS` under the memory and time limits; a hang fails the test."""
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1", OMP_NUM_THREADS="1")
    completed = subprocess.run(
        [sys.executable, "-m", "tscope", *map(str, args)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        preexec_fn=_limits,
    )
    return Outcome(completed.returncode, completed.stdout, completed.stderr)


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under root (links not followed) with a hash of what it holds, to prove that
    nothing around a test changed."""
    digest: dict[str, str] = {}
    for directory, subdirs, files in os.walk(root):
        for name in sorted(subdirs + files):
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                digest[relative] = "link:" + os.readlink(path)
            elif path.is_file():
                digest[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                digest[relative] = "dir" if path.is_dir() else "other"
    return digest
