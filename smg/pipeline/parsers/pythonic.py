"""Pythonic tool calls (Llama 4 and others): a Python list of keyword-only calls (pure).

    Checking both. [get_tide(port="Brest", days=2), get_wind(at={"lat": 48.4, "dry": None})]
    <|python_start|>[ping()]<|python_end|>

A list starts at any `[` followed by an identifier and `(` (so `[1]` or `[link](url)` are text at
once); text before and after it is content, as in the Rust gateway, and whitespace touching a
call list is dropped. `<|python_start|>` / `<|python_end|>` (Llama 4) are dropped wherever they
appear. The list's end is found by bracket matching that skips quoted strings; it is then parsed
with `ast.parse` (no code runs) and each keyword value with `ast.literal_eval`: str, int, float,
bool, None, and lists, tuples and dicts of them (True/False/None become true/false/null, tuples
arrays, non-string dict keys strings). Positional arguments, `**kwargs`, repeated keywords,
non-literal values (names, calls, sets, bytes, complex, inf/nan) make the list malformed: it is
returned verbatim as content. A list that is not closed by the end of the stream is content.
Deviation from Rust: a bare name as a value (`unit=celsius`) is malformed, not the string.
Known limit: triple-quoted strings can mislead the bracket matching (the list is then malformed).
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

from smg.pipeline.parsers.engine import NO_MARKERS, Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.types import IdFactory, canonical_json

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
_MARKERS = Markers(PYTHON_START, PYTHON_END)
_CLOSERS = {")": "(", "]": "[", "}": "{"}

# phases of the list prefix `[ name (`, then the bracketed body
_OPEN, _NAME, _AFTER_NAME, _BODY = 0, 1, 2, 3


class _ListEnd:
    """Decides, one character at a time, where a `[name(...), ...]` list ends or fails."""

    __slots__ = ("_escape", "_phase", "_quote", "_stack")

    def __init__(self) -> None:
        self._phase = _OPEN
        self._stack = ["["]
        self._quote = ""
        self._escape = False

    def feed(self, text: str) -> tuple[bool, int]:
        """(True, i): the list ends just before `text[i]`; (False, i): `text[i]` cannot belong
        to a call list; (False, -1): nothing decided yet."""
        for i, ch in enumerate(text):
            if self._phase != _BODY:
                if not self._prefix(ch):
                    return False, i
            elif self._quote:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == self._quote:
                    self._quote = ""
            elif ch in "'\"":
                self._quote = ch
            elif ch in "([{":
                self._stack.append(ch)
            elif ch in _CLOSERS:
                if self._stack[-1] != _CLOSERS[ch]:
                    return False, i
                self._stack.pop()
                if not self._stack:
                    return True, i + 1
        return False, -1

    def _prefix(self, ch: str) -> bool:
        phase = self._phase
        if ch == "(" and phase in (_NAME, _AFTER_NAME):
            self._phase = _BODY
            self._stack.append("(")
        elif ch.isspace() and phase != _NAME:
            pass
        elif ch.isspace():
            self._phase = _AFTER_NAME
        elif phase == _OPEN and ch.isidentifier():
            self._phase = _NAME
        elif phase == _NAME and f"a{ch}".isidentifier():
            pass
        else:
            return False
        return True


class _NotLiteral(ValueError):
    pass


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotLiteral("inf/nan")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {_json_key(k): _json_value(v) for k, v in value.items()}
    raise _NotLiteral(type(value).__name__)


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(_json_value(key))
    raise _NotLiteral("container as a dict key")


def parse_call_list(source: str) -> list[tuple[str, str]] | None:
    """`[f(a=1), g()]` -> [(name, canonical arguments)], or None if it is not such a list."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls = []
    for node in tree.body.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        args: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None or keyword.arg in args:
                return None
            try:
                args[keyword.arg] = _json_value(ast.literal_eval(keyword.value))
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
        calls.append((node.func.id, canonical_json(args)))
    return calls


class PythonicParser(ToolParserBase):
    """`[f(a=1), g(b="x")]` call lists, optionally inside `<|python_start|>`/`<|python_end|>`."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._in_list = False
        self._trim = WsTrim(hold_trailing=True)
        self._ws_before = ""
        self._list: list[str] = []
        self._end = _ListEnd()

    def active_markers(self) -> Markers:
        return NO_MARKERS if self._in_list else _MARKERS

    def on_marker(self, marker: str) -> None:
        """The python start/end tags are dropped."""

    def on_text(self, text: str) -> None:
        if not self._in_list:
            start = text.find("[")
            if start < 0:
                self.out.normal(self._trim.feed(text))
                return
            self.out.normal(self._trim.feed(text[:start]))
            self._ws_before = self._trim.take_held()
            self._in_list, self._list, self._end = True, ["["], _ListEnd()
            self.unread(text[start + 1 :])
            return
        ended, i = self._end.feed(text)
        if i < 0:
            self._list.append(text)
            return
        self._list.append(text[:i])
        self._in_list = False
        source = "".join(self._list)
        calls = parse_call_list(source) if ended else None
        if calls is None:
            self.out.normal(self._trim.feed(self._ws_before + source))
        else:
            for name, args in calls:
                self.out.begin_call(name, args)
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
        self.unread(text[i:])

    def on_finish(self) -> None:
        if self._in_list:
            self.out.normal(self._trim.feed(self._ws_before + "".join(self._list)))
        self.out.normal(self._trim.take_held())
