"""case.json writes the characters that act instead of printing as JSON escapes: the same string
once parsed, and nothing reversed or hidden when the file is shown (red team, session 27: a bidi
override from a TensorBoard tag was raw in the metrics' keys). Other text stays as written."""

from __future__ import annotations

import json

from tscope.model.visible_text import JSON_INVISIBLE
from tscope.output_writer import json_text


def test_invisible_characters_are_json_escapes_and_the_rest_stays() -> None:
    payload = {"loss\u202egpj": "x\U000e0041y\x7f\u0085\u2028\u200b", "学习率": "损失"}
    text = json_text(payload, round_floats=False)
    assert json.loads(text) == payload
    assert JSON_INVISIBLE.search(text) is None
    assert "\\u202e" in text and "\\udb40\\udc41" in text
    assert "学习率" in text and "损失" in text
