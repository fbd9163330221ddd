"""Compiled templates from the user cache: same code as compiling, never from a doubtful file."""

from __future__ import annotations

import marshal
import os
from pathlib import Path

import jinja2
import pytest

from tscope.render import view
from tscope.render.html import inline_html
from tscope.render.template_cache import UserTemplateCache, attach_user_cache, environment_settings


def _environment(folder: Path, autoescape: bool = True) -> jinja2.Environment:
    environment = view.template_environment.__wrapped__(autoescape)  # a fresh one, not shared
    environment.filters["inline"] = inline_html
    environment.bytecode_cache = UserTemplateCache(folder, environment_settings(environment))
    return environment


def _code(template: jinja2.Template) -> bytes:
    return marshal.dumps(template.root_render_func.__code__)


def test_cached_template_is_the_compiled_one(tmp_path: Path) -> None:
    folder = tmp_path / "templates"
    compiled = _environment(folder).get_template("case.html.j2")
    assert list(folder.glob("*.code"))  # written on first use
    loaded = _environment(folder).get_template("case.html.j2")
    assert _code(loaded) == _code(compiled)
    uncached = view.template_environment.__wrapped__(True)
    uncached.filters["inline"] = inline_html
    uncached.bytecode_cache = None
    assert _code(uncached.get_template("case.html.j2")) == _code(compiled)


def _tiny(folder: Path, source: str, autoescape: bool) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.DictLoader({"t.j2": source}), autoescape=autoescape
    )
    return attach_user_cache(environment)


def test_other_settings_or_source_are_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(tmp_path))
    text = "{{ value }}"
    assert _tiny(tmp_path, text, True).get_template("t.j2").render(value="<b>") == "&lt;b&gt;"
    # Same name and source, autoescape off: the escaping code must not be reused.
    assert _tiny(tmp_path, text, False).get_template("t.j2").render(value="<b>") == "<b>"
    assert _tiny(tmp_path, text + "!", True).get_template("t.j2").render(value="x") == "x!"


def _plant(environment: jinja2.Environment, source: str, planted: str) -> Path:
    """A cache file for `source` whose code prints `planted`, as only a writer could make it."""
    cache = environment.bytecode_cache
    assert isinstance(cache, UserTemplateCache)
    bucket = cache.get_bucket(environment, "t.j2", None, source)
    cache.folder.mkdir(parents=True, exist_ok=True)
    path = cache.folder / f"{bucket.key}.code"
    code = environment.compile(planted, "t.j2", None)
    path.write_bytes(cache._header(bucket) + marshal.dumps(code))
    os.chmod(path, 0o600)
    return path


def test_only_a_private_file_in_a_private_folder_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(tmp_path))
    source = "{{ 40 + 2 }}"
    path = _plant(_tiny(tmp_path, source, True), source, "planted")
    os.chmod(path.parent, 0o700)
    # Private: loaded (which is what makes the checks below meaningful).
    assert _tiny(tmp_path, source, True).get_template("t.j2").render() == "planted"
    path = _plant(_tiny(tmp_path, source, True), source, "planted")
    os.chmod(path, 0o666)  # others may write it
    assert _tiny(tmp_path, source, True).get_template("t.j2").render() == "42"
    path = _plant(_tiny(tmp_path, source, True), source, "planted")
    os.chmod(path.parent, 0o777)  # others may replace it
    assert _tiny(tmp_path, source, True).get_template("t.j2").render() == "42"
    os.chmod(path.parent, 0o700)
    elsewhere = tmp_path / "elsewhere"
    path.parent.rename(elsewhere)
    path.parent.symlink_to(elsewhere)
    _plant(_tiny(tmp_path, source, True), source, "planted")
    assert _tiny(tmp_path, source, True).get_template("t.j2").render() == "42"


def test_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TSCOPE_TEMPLATE_CACHE", "0")
    assert _tiny(tmp_path, "{{ 3 }}", True).get_template("t.j2").render() == "3"
    assert not (tmp_path / "templates").exists()
