"""Typing XML-style tool-call argument values by the request's JSON schema (pure).

XML formats (`qwen_coder`, `glm45_moe`, `glm47_moe`, `step3`, `minimax_m2`) carry every argument
as raw text between tags. As in the Rust gateway, the declared JSON-schema type of the parameter
decides what the text becomes:

* `string`: the text itself, never JSON-decoded (`4`, `true` and `"quoted"` stay as written);
  only the format's structural whitespace is removed (`ValueStyle.strip_string`).
* `integer` / `number` / `boolean` / `object` / `array`: parsed (`True`/`False` accepted for
  booleans). If the text does not parse as the declared type, it is inferred as below.
* no declared type (unknown tool, unknown parameter, no schema): inferred: JSON (no NaN or
  Infinity), then the Python literals `True`/`False`/`None`, else the text as a string.

Union types (`["integer", "null"]`, `anyOf`, `oneOf`) resolve like the Rust gateway's
`declared_schema_type`: a `string` branch wins (keeping text verbatim is the safe choice),
otherwise the first non-null type. `$ref` is not resolved (the parameter is inferred).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smg.pipeline.parsers.json_calls import loads_strict

_INTEGER = re.compile(r"[+-]?\d+")
_PY_LITERALS: dict[str, Any] = {"True": True, "False": False, "None": None}
_MISSING = object()


def strip_one_line_break(text: str) -> str:
    """Drop at most one structural line break (`\\n` or `\\r\\n`) at each edge."""
    if text.startswith("\r\n"):
        text = text[2:]
    elif text.startswith("\n"):
        text = text[1:]
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    return text


def keep(text: str) -> str:
    return text


def strip_all(text: str) -> str:
    return text.strip()


_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))


def decode_xml_entities(text: str) -> str:
    """The five predefined XML entities (`&amp;` last, so `&amp;lt;` gives `&lt;`)."""
    if "&" not in text:
        return text
    for entity, char in _ENTITIES:
        text = text.replace(entity, char)
    return text


@dataclass(frozen=True, slots=True)
class ValueStyle:
    """How one format's raw value text is cleaned before typing.

    `strip_string` shapes a declared-string value; `strip_other` shapes the text that is typed
    (and kept, if inference falls back to a string) for every other case.
    """

    strip_string: Callable[[str], str] = keep
    strip_other: Callable[[str], str] = strip_all
    decode_entities: bool = False


def declared_type(schema: Any) -> str | None:
    """The one type a parameter schema declares (string preferred in unions), or None."""
    if not isinstance(schema, dict):
        return None
    candidates: list[str] = []
    declared = schema.get("type")
    if isinstance(declared, str):
        candidates.append(declared)
    elif isinstance(declared, list):
        candidates.extend(t for t in declared if isinstance(t, str))
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            candidates.extend(t for t in map(declared_type, branches) if t is not None)
    if "string" in candidates:
        return "string"
    return next((t for t in candidates if t != "null"), None)


def parameter_types(parameters_schema: dict | None) -> dict[str, str]:
    """`parameter name -> declared type` from a tool's `parameters` schema (maybe empty)."""
    props = parameters_schema.get("properties") if parameters_schema else None
    if not isinstance(props, dict):
        return {}
    types = {}
    for name, schema in props.items():
        found = declared_type(schema)
        if found is not None:
            types[name] = found
    return types


def typed_value(raw: str, declared: str | None, style: ValueStyle) -> Any:
    """One argument value: raw text between the tags -> a JSON value."""
    if style.decode_entities:
        raw = decode_xml_entities(raw)
    if declared == "string":
        return style.strip_string(raw)
    text = style.strip_other(raw)
    value = _coerce(text.strip(), declared)
    return _infer(text) if value is _MISSING else value


def _coerce(text: str, declared: str | None) -> Any:
    if declared == "integer":
        return int(text) if _INTEGER.fullmatch(text) else _MISSING
    if declared == "number":
        value = _json(text)
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        return value if is_number else _MISSING
    if declared == "boolean":
        lowered = {"true": True, "True": True, "false": False, "False": False}
        return lowered.get(text, _MISSING)
    if declared in ("object", "array"):
        return _json(text)
    return _MISSING


def _infer(text: str) -> Any:
    core = text.strip()
    value = _json(core)
    if value is not _MISSING:
        return value
    return _PY_LITERALS.get(core, text)


def _json(text: str) -> Any:
    if not text:
        return _MISSING
    try:
        value = loads_strict(text)
        json.dumps(value, allow_nan=False)  # overflowing numbers (1e400) became inf
    except ValueError:
        return _MISSING
    return value


def typed_arguments(
    pairs: list[tuple[str, str]], parameters_schema: dict | None, style: ValueStyle
) -> dict[str, Any]:
    """(key, raw text) pairs of one call -> its arguments object (a repeated key: last wins)."""
    types = parameter_types(parameters_schema)
    return {key: typed_value(raw, types.get(key), style) for key, raw in pairs}
