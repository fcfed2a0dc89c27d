"""Typed reads of one field of a JSON request body, with the Rust gateway's 400s. Pure.

Each reader takes the body and a field name and returns the value or None (null means "not
given"), or raises an `ApiError` with `param` set: `invalid_type` for a wrong JSON type,
`decimal_below_min_value` / `decimal_above_max_value` for a number out of range,
`integer_below_min_value` / `integer_above_max_value` (or `invalid_value` past u32) for an integer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from smg.errors import ApiError, invalid_type, invalid_value

U32_MAX = 2**32 - 1


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number_field(
    body: Mapping[str, Any], name: str, lo: float, hi: float, *, lo_exclusive: bool = False
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not is_number(value):
        raise invalid_type(
            f"Invalid type for '{name}': expected a number, but got {kind_of(value)} instead.",
            param=name,
        )
    x = float(value)
    if x < lo or (lo_exclusive and x == lo):
        op = ">" if lo_exclusive else ">="
        raise ApiError(
            400,
            "decimal_below_min_value",
            f"Invalid '{name}': decimal below minimum value. "
            f"Expected a value {op} {lo}, but got {value} instead.",
            param=name,
        )
    if x > hi:
        raise ApiError(
            400,
            "decimal_above_max_value",
            f"Invalid '{name}': decimal above maximum value. "
            f"Expected a value <= {hi}, but got {value} instead.",
            param=name,
        )
    return x


def uint_field(
    body: Mapping[str, Any], name: str, *, lo: int = 0, hi: int = U32_MAX, param: str | None = None
) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    return check_uint(value, param or name, lo=lo, hi=hi)


def check_uint(value: object, param: str, *, lo: int = 0, hi: int = U32_MAX) -> int:
    if not is_int(value):
        raise invalid_type(
            f"Invalid type for '{param}': expected an integer, but got {kind_of(value)} instead.",
            param=param,
        )
    assert isinstance(value, int)
    if value > U32_MAX:
        raise invalid_value(
            f"Invalid '{param}': {value} is out of range for an unsigned 32-bit integer.",
            param=param,
        )
    if value < lo:
        raise ApiError(
            400,
            "integer_below_min_value",
            f"Invalid '{param}': integer below minimum value. "
            f"Expected a value >= {lo}, but got {value} instead.",
            param=param,
        )
    if value > hi:
        raise ApiError(
            400,
            "integer_above_max_value",
            f"Invalid '{param}': integer above maximum value. "
            f"Expected a value <= {hi}, but got {value} instead.",
            param=param,
        )
    return value


def bool_field(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid_type(
            f"Invalid type for '{name}': expected a boolean, but got {kind_of(value)} instead.",
            param=name,
        )
    return value


def string_field(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_type(
            f"Invalid type for '{name}': expected a string, but got {kind_of(value)} instead.",
            param=name,
        )
    return value
