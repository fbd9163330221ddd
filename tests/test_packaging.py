"""Both installs work: the editable one (this test run) and a built wheel's layout."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    on_disk = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((name, *relative)))
    # tscope/ subfolders are found by the "tscope" mapping; drop the doubles it sees via links.
    on_disk = {p for p in on_disk if "__pycache__" not in p}
    assert on_disk <= listed, f"missing from pyproject packages: {sorted(on_disk - listed)}"


def test_editable_install_maps_analyzers_and_templates():
    import tscope.analyzers
    import tscope.templates

    assert Path(tscope.analyzers.__file__).parent == ROOT / "analyzers"
    assert Path(tscope.templates.__file__).parent == ROOT / "templates"


def test_wheel_holds_the_mapped_packages_and_runs(tmp_path):
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
    assert "tscope/analyzers/__init__.py" in names
    assert any(re.match(r"tscope/templates/case\.html\.j2$", n) for n in names)
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
