"""Both installs work: the editable one (this test run, through the links) and a built wheel's
layout (setuptools copies what the links point to)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tscope_analyzers_and_templates_are_links_to_the_top_level_folders():
    # A checkout without symlinks (git's core.symlinks=false) turns them into small text files:
    # this test names that instead of an ImportError somewhere else.
    for name in ("analyzers", "templates"):
        link = ROOT / "tscope" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", link
    import tscope.analyzers
    import tscope.templates

    assert Path(tscope.analyzers.__file__).resolve().parent == ROOT / "analyzers"
    assert Path(tscope.templates.__file__).resolve().parent == ROOT / "templates"


def test_wheel_holds_analyzers_and_templates_inside_tscope_and_runs(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next(tmp_path.glob("tscope_ml-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    # Every source file of the two top-level folders, at its place inside tscope.
    for folder, suffixes in (("analyzers", {".py"}), ("templates", {".py", ".j2", ".css"})):
        shipped = {
            f"tscope/{folder}/{p.relative_to(ROOT / folder).as_posix()}"
            for p in (ROOT / folder).rglob("*")
            if p.suffix in suffixes and "__pycache__" not in p.parts
        }
        assert shipped and shipped <= set(names), sorted(shipped - set(names))
    assert not any(n.startswith("analyzers/") for n in names)
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    # Run from an empty folder with only the wheel's contents on the path (deps from this venv).
    probe = (
        "import tscope, tscope.analyzers, jinja2;"
        "loader = jinja2.PackageLoader('tscope.templates', package_path='.');"
        "loader.get_source(jinja2.Environment(), 'case.html.j2');"
        "print(tscope.analyzers.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert str(unpacked) in result.stdout
