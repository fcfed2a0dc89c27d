"""The shared state machine of XML-style tool-call formats: text, then whole blocks (pure).

A format is an `OPEN ... CLOSE` block marker pair plus `parse_block(body, closed)`, which turns a
block's body into one or more calls or rejects it. The machine:

* text outside blocks is content as soon as it cannot be the start of `OPEN`; whitespace
  touching a block is dropped (as in `qwen.py`);
* a block is buffered until `CLOSE`, then parsed whole: every call of the block is emitted (one
  `CallDelta` each, canonical arguments), or, if the body is malformed, the block comes back
  verbatim as content, markers included;
* a block still open at the end of the stream counts if `parse_block(body, closed=False)`
  accepts it (formats accept only bodies whose inner structure is complete); else it is content.

Buffering whole blocks costs latency (a call is seen once its block closes) but makes streaming
equal non-streaming for any chunking, and lets a malformed block fall back to text.
"""

from __future__ import annotations

import re
from typing import ClassVar

from smg.pipeline.parsers.engine import Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.types import IdFactory, canonical_json
from smg.pipeline.parsers.xml_values import ValueStyle, typed_arguments

Call = tuple[str, str]
"""(name, canonical JSON arguments)."""


class XmlBlockParser(ToolParserBase):
    """Base class: subclasses set `OPEN`, `CLOSE`, `STYLE` and implement `parse_block`."""

    OPEN: ClassVar[str]
    CLOSE: ClassVar[str]
    STYLE: ClassVar[ValueStyle] = ValueStyle()

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._text_markers = Markers(self.OPEN)
        self._body_markers = Markers(self.CLOSE)
        self._in_block = False
        self._body: list[str] = []
        self._ws_before = ""
        self._trim = WsTrim(hold_trailing=True)

    # -- the format's part -------------------------------------------------------------
    def parse_block(self, body: str, closed: bool) -> list[Call] | None:
        """The calls in a block body; None if malformed (or, with `closed=False`, incomplete)."""
        raise NotImplementedError

    def make_call(self, name: str, pairs: list[tuple[str, str]]) -> Call:
        """A call from its name and raw (key, value text) pairs, typed by the tool's schema."""
        args = typed_arguments(pairs, self.tool_schemas.get(name), self.STYLE)
        return name, canonical_json(args)

    # -- engine hooks ------------------------------------------------------------------
    def active_markers(self) -> Markers:
        return self._body_markers if self._in_block else self._text_markers

    def on_text(self, text: str) -> None:
        if self._in_block:
            self._body.append(text)
        else:
            self.out.normal(self._trim.feed(text))

    def on_marker(self, marker: str) -> None:
        if marker == self.OPEN:
            self._ws_before = self._trim.take_held()
            self._in_block, self._body = True, []
        else:
            self._close(closed=True)

    def on_finish(self) -> None:
        if self._in_block:
            self._close(closed=False)
        else:
            self.out.normal(self._trim.take_held())

    def _close(self, closed: bool) -> None:
        body = "".join(self._body)
        self._in_block, self._body = False, []
        calls = self.parse_block(body, closed)
        if calls:
            for name, args in calls:
                self.out.begin_call(name, args)
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
        else:
            closer = self.CLOSE if closed else ""
            self.out.normal(self._ws_before + self.OPEN + body + closer)
            self._trim = WsTrim(hold_trailing=True)


class NamedInvoke:
    """`<TAG name="NAME"> <PARAM name="KEY">VALUE</PARAM>... </TAG>` (MiniMax, Step-3).

    `match(text, pos)` reads one invoke at `pos` (leading whitespace allowed) and returns
    (name, raw pairs, end position), or None if anything but whitespace sits between the tags.
    A value ends at the first `</PARAM>`.
    """

    __slots__ = ("_close", "_open", "_param")

    def __init__(self, tag: str, param_tag: str) -> None:
        self._open = re.compile(rf'\s*<{re.escape(tag)}\s+name="([^"]*)"\s*>')
        self._param = re.compile(
            rf'\s*<{re.escape(param_tag)}\s+name="([^"]*)"\s*>(.*?)</{re.escape(param_tag)}>',
            re.DOTALL,
        )
        self._close = re.compile(rf"\s*</{re.escape(tag)}>")

    def match(self, text: str, pos: int) -> tuple[str, list[tuple[str, str]], int] | None:
        head = self._open.match(text, pos)
        if head is None or not head.group(1).strip():
            return None
        pos = head.end()
        pairs: list[tuple[str, str]] = []
        while (param := self._param.match(text, pos)) is not None:
            key = param.group(1).strip()
            if not key:
                return None
            pairs.append((key, param.group(2)))
            pos = param.end()
        tail = self._close.match(text, pos)
        return None if tail is None else (head.group(1).strip(), pairs, tail.end())
