"""Plain JSON tool calls: the output is a call object or an array of them (pure).

    {"name": "get_weather", "arguments": {"city": "Oslo"}}
    [{"name": "a", "parameters": {}}, {"name": "b", "arguments": {"x": 1}}]

Used for constrained decoding (the gateway forces a JSON schema) and models without a native
format. Only output whose first non-space character is `{` or `[` is a candidate; anything else
is content, streamed at once. The value is buffered until it closes, then all its calls are
emitted; if any element is not a valid call, the whole value is returned verbatim as content.
Text after a valid value is content, left-stripped.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import JsonValueEnd, calls_from_json
from smg.pipeline.parsers.types import IdFactory

_START, _VALUE, _TEXT = 0, 1, 2


class JsonParser(ToolParserBase):
    """A bare JSON call object or array of call objects."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._state = _START
        self._lead = ""
        self._end = JsonValueEnd()
        self._value: list[str] = []
        self._trim = WsTrim()

    def on_text(self, text: str) -> None:
        if self._state == _TEXT:
            self.out.normal(self._trim.feed(text))
        elif self._state == _START:
            core = text.lstrip()
            if not core:
                self._lead += text
            elif core[0] in "{[":
                self._lead += text[: len(text) - len(core)]
                self._state = _VALUE
                self.unread(core)
            else:
                self._state = _TEXT
                self.out.normal(self._lead + text)
        else:
            end = self._end.feed(text)
            if end < 0:
                self._value.append(text)
                return
            self._value.append(text[:end])
            value = "".join(self._value)
            calls = calls_from_json(value)
            if calls is None:
                self.out.normal(self._lead + value)
            else:
                for name, args in calls:
                    self.out.begin_call(name, args)
                self._trim = WsTrim(strip_leading=True)
            self._state = _TEXT
            self.unread(text[end:])

    def on_finish(self) -> None:
        if self._state == _START:
            self.out.normal(self._lead)
        elif self._state == _VALUE:
            self.out.normal(self._lead + "".join(self._value))
