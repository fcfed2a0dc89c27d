"""Llama 3.x tool calls: JSON objects after `<|python_tag|>` or at the start of the output (pure).

    <|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}; {"name": "ping", ...}

A call group starts at `<|python_tag|>` (anywhere) or when the output's first non-space character
is `{`. Inside a group, objects `{"name", "parameters"|"arguments"}` are separated by `;` and
whitespace (a repeated `<|python_tag|>` is tolerated). Any other character ends the group and is
content again. A malformed object (bad JSON, no name) ends the group: its text, and the group's
opening text if no call came out of it yet, is returned verbatim as content. An object cut off by
the end of the stream is returned as content.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import NO_MARKERS, Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import JsonValueEnd, call_from_object, loads_strict
from smg.pipeline.parsers.types import IdFactory

PYTHON_TAG = "<|python_tag|>"
_MARKERS = Markers(PYTHON_TAG)
_START, _TEXT, _GROUP, _OBJECT = 0, 1, 2, 3
_SEPARATORS = frozenset(" \t\r\n;")


class LlamaParser(ToolParserBase):
    """`<|python_tag|>` + `;`-separated JSON call objects."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._state = _START
        self._raw = ""  # the group's text so far, returned verbatim if it yields no call
        self._group_calls = 0
        self._trim = WsTrim(hold_trailing=True)
        self._end = JsonValueEnd()
        self._obj: list[str] = []

    def active_markers(self) -> Markers:
        return NO_MARKERS if self._state == _OBJECT else _MARKERS

    def on_marker(self, marker: str) -> None:  # always the python tag
        if self._state in (_START, _TEXT):
            self._raw = (self._raw if self._state == _START else "") + self._trim.take_held()
            self._open_group(marker)
        else:
            self._raw += marker

    def on_text(self, text: str) -> None:
        if self._state == _START:
            core = text.lstrip()
            if not core:
                self._raw += text
                return
            if core[0] == "{":
                self._open_group(text[: len(text) - len(core)])
                self.unread(core)
            else:
                self._state = _TEXT
                self.out.normal(self._trim.feed(self._raw + text))
                self._raw = ""
        elif self._state == _TEXT:
            self.out.normal(self._trim.feed(text))
        elif self._state == _GROUP:
            self._group_text(text)
        else:
            self._object_text(text)

    def on_finish(self) -> None:
        if self._state == _TEXT:
            self.out.normal(self._trim.take_held())
        elif self._state == _OBJECT:
            self.out.normal(self._raw + "".join(self._obj))
        elif self._state == _START or self._group_calls == 0:
            self.out.normal(self._raw)

    def _open_group(self, opener: str) -> None:
        self._state = _GROUP
        self._raw += opener
        self._group_calls = 0

    def _group_text(self, text: str) -> None:
        i = 0
        while i < len(text) and text[i] in _SEPARATORS:
            i += 1
        self._raw += text[:i]
        if i == len(text):
            return
        if text[i] == "{":
            self._state = _OBJECT
            self._end = JsonValueEnd()
            self._obj = []
        else:  # the group is over; the rest is content
            self._to_text(keep_raw=self._group_calls == 0)
        self.unread(text[i:])

    def _object_text(self, text: str) -> None:
        end = self._end.feed(text)
        if end < 0:
            self._obj.append(text)
            return
        self._obj.append(text[:end])
        obj_text = "".join(self._obj)
        try:
            call = call_from_object(loads_strict(obj_text))
        except ValueError:
            call = None
        if call is None:  # separators after a call are dropped; the group opener is not
            self._raw = (self._raw if self._group_calls == 0 else "") + obj_text
            self._to_text(keep_raw=True)
        else:
            self.out.begin_call(*call)
            self._group_calls += 1
            self._raw = ""
            self._state = _GROUP
        self.unread(text[end:])

    def _to_text(self, keep_raw: bool) -> None:
        if keep_raw:
            self.out.normal(self._raw)
        self._raw = ""
        self._state = _TEXT
        self._trim = WsTrim(strip_leading=not keep_raw, hold_trailing=True)
