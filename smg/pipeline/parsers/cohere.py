"""Cohere Command R / A tool calls: a JSON action block (pure).

    <|START_RESPONSE|>Let me check.<|END_RESPONSE|>
    <|START_ACTION|>[{"tool_name": "get_tide", "parameters": {"port": "Brest"}}]<|END_ACTION|>

The block holds one call object or an array of them, `tool_name` (or `name`) and `parameters`
(or `arguments`), as in the Rust gateway. Any number of blocks; each is emitted when it closes, or
at the end of the stream if its JSON is complete (`<|END_ACTION|>` may be a stop string). The
response/text markers (`<|START_RESPONSE|>`, `<|END_RESPONSE|>`, `<|START_TEXT|>`, `<|END_TEXT|>`)
are dropped from content. Content is trimmed at both ends (as Rust trims it) and whitespace
touching a block is dropped. A block that is not a non-empty list of valid calls (bad JSON, an
item without a name, non-object parameters) is returned verbatim as content. Known limit: an
`<|END_ACTION|>` inside a JSON string ends the block early (the block is then malformed).
"""

from __future__ import annotations

from typing import Any

from smg.pipeline.parsers.engine import Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import call_from_object, loads_strict
from smg.pipeline.parsers.types import IdFactory

START_ACTION = "<|START_ACTION|>"
END_ACTION = "<|END_ACTION|>"
TEXT_MARKERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")
_TEXT_MARKERS = Markers(START_ACTION, *TEXT_MARKERS)
_ACTION_MARKERS = Markers(END_ACTION)


def _calls(body: str) -> list[tuple[str, str]] | None:
    try:
        value = loads_strict(body)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(_as_call(item)) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _as_call(item: Any) -> Any:
    if not isinstance(item, dict):
        return None
    name = item.get("tool_name", item.get("name"))
    args = item["parameters"] if "parameters" in item else item.get("arguments")
    return {"name": name, "arguments": args}


class CohereParser(ToolParserBase):
    """`<|START_ACTION|>` JSON `<|END_ACTION|>` blocks."""

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._in_action = False
        self._body: list[str] = []
        self._ws_before = ""
        self._trim = WsTrim(strip_leading=True, hold_trailing=True)

    def active_markers(self) -> Markers:
        return _ACTION_MARKERS if self._in_action else _TEXT_MARKERS

    def on_text(self, text: str) -> None:
        if self._in_action:
            self._body.append(text)
        else:
            self.out.normal(self._trim.feed(text))

    def on_marker(self, marker: str) -> None:
        if marker == START_ACTION:
            self._ws_before = self._trim.take_held()
            self._in_action, self._body = True, []
        elif marker == END_ACTION:
            self._close(END_ACTION)
        # response/text markers are dropped

    def on_finish(self) -> None:
        if self._in_action:
            self._close("")
        self._trim.take_held()  # trailing whitespace of the content is dropped

    def _close(self, closer: str) -> None:
        body = "".join(self._body)
        self._in_action = False
        calls = _calls(body)
        if calls is None:
            self.out.normal(self._ws_before + START_ACTION + body + closer)
            self._trim = WsTrim(hold_trailing=True)
        else:
            for name, args in calls:
                self.out.begin_call(name, args)
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
