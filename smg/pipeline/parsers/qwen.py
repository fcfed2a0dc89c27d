"""Qwen (2.5 / 3, Hermes-style) tool calls: JSON bodies between `<tool_call>` tags (pure).

    Let me look that up.
    <tool_call>
    {"name": "search", "arguments": {"q": "tides"}}
    </tool_call>

Any number of blocks, with text before, between and after them. Text outside blocks is content;
whitespace touching a block is dropped. A block whose body is not a call object (bad JSON, no
name, non-object arguments) is returned verbatim as content, tags included. A block left open at
the end of the stream still counts if its body is a complete call (`</tool_call>` is often a stop
string); otherwise it is returned as content.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import calls_from_json
from smg.pipeline.parsers.types import IdFactory

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_TEXT_MARKERS = Markers(OPEN)
_BODY_MARKERS = Markers(CLOSE)


class QwenParser(ToolParserBase):
    """`<tool_call>{json}</tool_call>` blocks."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._in_call = False
        self._body: list[str] = []
        self._ws_before = ""
        self._trim = WsTrim(hold_trailing=True)

    def active_markers(self) -> Markers:
        return _BODY_MARKERS if self._in_call else _TEXT_MARKERS

    def on_text(self, text: str) -> None:
        if self._in_call:
            self._body.append(text)
        else:
            self.out.normal(self._trim.feed(text))

    def on_marker(self, marker: str) -> None:
        if marker == OPEN:
            self._ws_before = self._trim.take_held()
            self._in_call, self._body = True, []
        else:
            self._close(CLOSE)

    def on_finish(self) -> None:
        if self._in_call:
            self._close("")
        else:
            self.out.normal(self._trim.take_held())

    def _close(self, closer: str) -> None:
        body = "".join(self._body)
        self._in_call = False
        calls = calls_from_json(body)
        if calls is not None and len(calls) == 1:
            name, args = calls[0]
            self.out.begin_call(name, args)
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
        else:
            self.out.normal(self._ws_before + OPEN + body + closer)
            self._trim = WsTrim(hold_trailing=True)
