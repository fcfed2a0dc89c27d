"""Mistral tool calls: `[TOOL_CALLS]` then a JSON array, or `NAME[ARGS]{...}` (pure).

    [TOOL_CALLS] [{"name": "get_tide", "arguments": {"port": "Brest"}}, {"name": ...}]
    [TOOL_CALLS]get_tide[ARGS]{"port": "Brest"}[TOOL_CALLS]get_wind[ARGS]{}

The first is the format before tokenizer v11 (an array, or a single object, of call objects with
`arguments`, or `parameters`); the second is v11+ (one `[TOOL_CALLS]` per call; `[ARGS]` may be
absent, the JSON object then follows the name directly). Text before and after calls is content,
streamed at once; whitespace touching a call is dropped. A name is letters, digits, `_`, `-` and
`.`; anything else after `[TOOL_CALLS]` (or bad JSON, or non-object arguments) makes the call
malformed: its text, marker included, is returned as content as soon as that is certain. A call
cut off by the end of the stream is returned as content.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import NO_MARKERS, Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import JsonValueEnd, calls_from_json, loads_strict
from smg.pipeline.parsers.types import IdFactory, canonical_json

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_TEXT_MARKERS = Markers(TOOL_CALLS)
_NAME_MARKERS = Markers(ARGS)
_TEXT, _NAME, _ARGS, _ARRAY = 0, 1, 2, 3


def _name_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_-."


class MistralParser(ToolParserBase):
    """`[TOOL_CALLS]` + JSON array, or `[TOOL_CALLS]NAME[ARGS]{...}` calls."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._state = _TEXT
        self._trim = WsTrim(hold_trailing=True)
        self._raw: list[str] = []  # the call's text so far, returned verbatim if malformed
        self._name = ""
        self._name_done = False  # whitespace followed the name: only [ARGS] or `{` may come
        self._end = JsonValueEnd()
        self._value: list[str] = []

    def active_markers(self) -> Markers:
        if self._state == _TEXT:
            return _TEXT_MARKERS
        return _NAME_MARKERS if self._state == _NAME else NO_MARKERS

    def on_marker(self, marker: str) -> None:
        if self._state == _TEXT:  # [TOOL_CALLS]
            self._raw = [self._trim.take_held(), marker]
            self._state, self._name, self._name_done = _NAME, "", False
        elif self._name:  # [ARGS] after a name
            self._raw.append(marker)
            self._open_value(_ARGS)
        else:  # [ARGS] with no name
            self._raw.append(marker)
            self._malformed()

    def on_text(self, text: str) -> None:
        if self._state == _TEXT:
            self.out.normal(self._trim.feed(text))
        elif self._state == _NAME:
            self._name_text(text)
        else:
            self._value_text(text)

    def on_finish(self) -> None:
        if self._state != _TEXT:
            self._raw.extend(self._value)
            self._malformed()
        self.out.normal(self._trim.take_held())

    def _name_text(self, text: str) -> None:
        for i, ch in enumerate(text):
            if ch.isspace():
                self._name_done = bool(self._name)
            elif _name_char(ch) and not self._name_done:
                self._name += ch
            elif ch == "{" or (ch == "[" and not self._name):
                self._raw.append(text[:i])
                self._open_value(_ARGS if self._name else _ARRAY)
                self.unread(text[i:])
                return
            else:
                self._raw.append(text[:i])
                self._malformed()
                self.unread(text[i:])
                return
        self._raw.append(text)

    def _open_value(self, state: int) -> None:
        self._state, self._end, self._value = state, JsonValueEnd(), []

    def _value_text(self, text: str) -> None:
        if not self._value:  # before the value starts: whitespace, then `{` (or `[`)
            core = text.lstrip()
            self._raw.append(text[: len(text) - len(core)])
            if not core:
                return
            if core[0] != "{" and (self._state == _ARGS or core[0] != "["):
                self._malformed()
                self.unread(core)
                return
            text = core
        end = self._end.feed(text)
        if end < 0:
            self._value.append(text)
            return
        self._value.append(text[:end])
        value = "".join(self._value)
        calls = self._calls(value)
        if calls is None:
            self._raw.append(value)
            self._malformed()
        else:
            for name, args in calls:
                self.out.begin_call(name, args)
            self._state, self._raw = _TEXT, []
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
        self.unread(text[end:])

    def _calls(self, value: str) -> list[tuple[str, str]] | None:
        if self._state == _ARRAY:
            return calls_from_json(value)
        try:
            args = loads_strict(value)
        except ValueError:
            return None
        return [(self._name, canonical_json(args))] if isinstance(args, dict) else None

    def _malformed(self) -> None:
        """Return the call's text as content and go back to plain text."""
        self.out.normal(self._trim.feed("".join(self._raw)))
        self._state, self._raw, self._value = _TEXT, [], []
