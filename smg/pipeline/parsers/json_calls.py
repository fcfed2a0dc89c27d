"""JSON pieces of the engine: where a JSON value ends, and turning JSON into a tool call (pure).

Argument streaming strategy: a call's JSON is buffered until it is complete, then the call is
emitted in one `CallDelta` (index, id, name and the full arguments). The cost is latency: a
client sees a call only once its JSON is closed (typically tens of tokens after it starts). The
gain is that nothing uncertain is ever sent: a malformed call can still be returned as plain
text, and the arguments are re-serialised canonically (`canonical_json`), so streaming and
non-streaming agree byte for byte whatever the chunking. A format that wants true incremental
arguments would add to `DeltaSink` a way to append fragments (`CallDelta` with no id or name),
provided the fragments it emits concatenate to the same canonical text.
"""

from __future__ import annotations

import json
from typing import Any

from smg.pipeline.parsers.types import canonical_json


class JsonValueEnd:
    """Finds where a JSON object/array that starts at the first fed character ends.

    Tracks nesting and strings character by character, so it works across any chunking. It does
    not validate; the complete text goes through `loads_strict` afterwards.
    """

    __slots__ = ("_depth", "_escape", "_in_string")

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escape = False

    def feed(self, text: str) -> int:
        """Index in `text` just past the end of the value, or -1 if it is not complete yet."""
        depth, in_string, escape = self._depth, self._in_string, self._escape
        for i, ch in enumerate(text):
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth <= 0:
                    self._depth, self._in_string, self._escape = 0, False, False
                    return i + 1
        self._depth, self._in_string, self._escape = depth, in_string, escape
        return -1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def loads_strict(text: str) -> Any:
    """`json.loads` without NaN/Infinity (they would not round-trip as JSON). Raises ValueError."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:  # absurdly deep nesting is malformed input, not our crash
        raise ValueError("JSON nested too deeply") from exc


def call_from_object(obj: Any) -> tuple[str, str] | None:
    """`{"name": ..., "arguments"|"parameters": {...}}` -> (name, canonical arguments) or None.

    Missing or null arguments mean `{}`; arguments given as a JSON string are decoded. Anything
    else that is not an object makes the call malformed (None).
    """
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    if args is None:
        args = {}
    elif isinstance(args, str):
        try:
            args = loads_strict(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name, canonical_json(args)


def calls_from_json(text: str) -> list[tuple[str, str]] | None:
    """A JSON call object, or a non-empty array of them -> calls; None if anything is off."""
    try:
        value = loads_strict(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]
