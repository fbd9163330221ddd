"""Reading one JSON object of a case file field by field, with the types the case model holds.

A missing field takes its default (case files an older tscope wrote lack later optional fields);
a field of the wrong type is refused with one line naming it (`CaseFormatError`), so a crafted or
broken case.json never reaches a renderer. Numbers keep the type they were written with (an int
stays an int) so that a case read back writes the same bytes; the strings "nan", "inf", "-inf"
that json_safe writes for non-finite floats read back as floats.
"""

from __future__ import annotations

import numbers
from typing import Any

NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class CaseFormatError(ValueError):
    """A case file field of the wrong shape; the message names the field, in one line."""


class Fields:
    """One JSON object of a case file; `where` names it in errors ("summary.card")."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise CaseFormatError(f"{where} is not a JSON object")
        self.data: dict[str, Any] = data
        self.where = where

    def _refuse(self, key: str, wanted: str) -> CaseFormatError:
        shown = type(self.data[key]).__name__
        return CaseFormatError(f"{self.where}.{key} is a {shown}, not {wanted}")

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._refuse(key, "a string")
        return value

    def optional_text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self._refuse(key, "a string or null")
        return value

    def integer(self, key: str) -> int:
        """A required integer (a step, a count)."""
        if key not in self.data:
            raise CaseFormatError(f"{self.where} has no {key}")
        value = self.optional_integer(key)
        if value is None:
            raise self._refuse(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise self._refuse(key, "an integer or null")
        return value  # type: ignore[return-value]  # numbers.Integral: int or a numpy integer

    def number(self, key: str, default: float = 0.0) -> float:
        value = self.optional_number(key)
        return default if value is None else value

    def optional_number(self, key: str) -> float | None:
        return self.number_value(key, self.data.get(key))

    def number_value(self, key: str, value: object) -> float | None:
        if value is None:
            return None
        if isinstance(value, str) and value in NONFINITE:
            return NONFINITE[value]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise CaseFormatError(f"{self.where}.{key} is a {type(value).__name__}, not a number")
        return value  # type: ignore[return-value]  # kept as written: an int stays an int

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if type(value).__name__ == "bool_":  # numpy's bool, from an analyzer's comparison
            return bool(value)
        if not isinstance(value, bool):
            raise self._refuse(key, "true or false")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self._refuse(key, "an object")
        return value

    def child(self, key: str) -> Fields | None:
        """A nested object as Fields; None when absent or null."""
        value = self.data.get(key)
        return None if value is None else Fields(value, f"{self.where}.{key}")

    def part(self, key: str) -> Fields:
        """A nested object as Fields; an empty one when absent or null (its fields default)."""
        return self.child(key) or Fields({}, f"{self.where}.{key}")

    def items(self, key: str) -> list[Any]:
        value = self.data.get(key, [])
        if not isinstance(value, list | tuple):
            raise self._refuse(key, "a list")
        return list(value)

    def records(self, key: str) -> list[Fields]:
        return [Fields(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(self.items(key))]

    def texts(self, key: str) -> list[str]:
        values = self.items(key)
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise CaseFormatError(f"{self.where}.{key}[{index}] is not a string")
        return values

    def integers(self, key: str) -> list[int]:
        values = self.items(key)
        for index, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise CaseFormatError(f"{self.where}.{key}[{index}] is not an integer")
        return values

    def numbers(self, key: str) -> list[float | None]:
        """A list of numbers; null entries (not measured) kept as None."""
        return [self.number_value(f"{key}[{i}]", v) for i, v in enumerate(self.items(key))]

    def matrix(self, key: str) -> list[list[float | None]]:
        rows = self.items(key)
        return [
            Fields({"row": row}, f"{self.where}.{key}[{index}]").numbers("row")
            for index, row in enumerate(rows)
        ]
