"""The one incremental engine every reasoning and tool-call format is built on (pure; no IO).

Pieces, smallest first:

* `Markers` - a frozen set of literal markers (`<think>`, `<tool_call>`, ...) with its lookup
  tables precomputed; build one per format state as a module constant.
* `MarkerScanner` - splits a text stream into `(text, marker)` events. It never decides early:
  text that could still be the start of a marker is held back (the idea of `stop.py`), and at a
  given position the longest marker wins. Every decision depends only on the text, never on how
  it was chunked, so the events concatenate to the same thing for any chunking.
* `WsTrim` - drops whitespace that touches a marker (leading and/or held trailing whitespace)
  without depending on chunking either.
* `DeltaSink` - collects what a step produced and numbers tool calls (ids from an `IdFactory`).
* `StreamParser` - the base class a format subclasses: it owns the scanner and the sink and turns
  `feed`/`finish`/`parse` into four hooks: `active_markers()`, `on_text()`, `on_marker()`,
  `on_finish()`. The format is then a small state machine: which markers are live in each state,
  and what text and markers do there. `unread(text)` hands text back to the scanner, for when a
  format switches state in the middle of a text event and the live markers change.

Adding a format = one file with a `StreamParser` subclass (see `qwen.py` for a marker-delimited
JSON body, `llama.py`/`json_format.py` for bare JSON) + one registry line in `__init__.py`.
Bodies that are JSON are handled by `json_calls.py` (completeness tracking + call assembly).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from smg.pipeline.parsers.types import (
    CallDelta,
    IdFactory,
    ParseDelta,
    ParseResult,
    aggregate,
    default_call_id,
)


class Markers:
    """An immutable set of literal markers plus the tables the scanner needs."""

    __slots__ = ("_first", "_longest", "_prefixes", "items")

    def __init__(self, *markers: str) -> None:
        self.items: tuple[str, ...] = tuple(dict.fromkeys(m for m in markers if m))
        # Longest first, so the first complete match at a position is the longest one.
        self._longest = tuple(sorted(self.items, key=len, reverse=True))
        self._prefixes = frozenset(m[:i] for m in self.items for i in range(1, len(m)))
        first = "".join(sorted({m[0] for m in self.items}))
        self._first = re.compile(f"[{re.escape(first)}]") if first else None

    def __repr__(self) -> str:
        return f"Markers{self.items!r}"

    def __contains__(self, marker: object) -> bool:
        return marker in self.items

    def __or__(self, other: Markers) -> Markers:
        return Markers(*self.items, *other.items)

    def next_event(self, buf: str, final: bool) -> tuple[int, int, str] | None:
        """Scan `buf` for the first decidable event.

        Returns (text_end, consumed, marker): `buf[:text_end]` is plain text and `marker` (maybe
        "") follows it, `consumed` characters in all. None means nothing is decidable yet.
        Unless `final`, a tail of `buf` that is a proper prefix of a marker is held back.
        """
        if self._first is None:
            return (len(buf), len(buf), "") if buf else None
        pos = 0
        n = len(buf)
        while True:
            hit = self._first.search(buf, pos)
            if hit is None:
                return (n, n, "") if n else None
            pos = hit.start()
            if not final and buf[pos:] in self._prefixes:
                # Could still grow into a (longer) marker: emit the text before it, hold the rest.
                return (pos, pos, "") if pos else None
            for marker in self._longest:
                if buf.startswith(marker, pos):
                    return pos, pos + len(marker), marker
            pos += 1


NO_MARKERS = Markers()


class MarkerScanner:
    """Buffers stream text and hands out `(text, marker)` events for the live marker set."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = ""

    @property
    def pending(self) -> str:
        return self._buf

    def push(self, text: str) -> None:
        self._buf += text

    def unread(self, text: str) -> None:
        """Put text back in front of the buffer (it is scanned again, maybe with other markers)."""
        self._buf = text + self._buf

    def next_event(self, markers: Markers, final: bool = False) -> tuple[str, str] | None:
        """The next `(text, marker)` event (either may be ""), or None until more text comes.

        With `final`, nothing is held back: the buffer always drains.
        """
        found = markers.next_event(self._buf, final)
        if found is None:
            return None
        text_end, consumed, marker = found
        text = self._buf[:text_end]
        self._buf = self._buf[consumed:]
        return text, marker


class WsTrim:
    """Chunk-invariant whitespace trimming of one text segment.

    `strip_leading` drops whitespace before the segment's first non-space character.
    `hold_trailing` holds trailing whitespace back until a non-space character follows; the
    owner then decides with `take_held()` (e.g. drop it because a marker follows, or emit it).
    """

    __slots__ = ("_held", "_hold_trailing", "_seen", "_strip_leading")

    def __init__(self, strip_leading: bool = False, hold_trailing: bool = False) -> None:
        self._strip_leading = strip_leading
        self._hold_trailing = hold_trailing
        self._held = ""
        self._seen = False

    @property
    def seen_content(self) -> bool:
        """True once a non-whitespace character went through."""
        return self._seen

    def feed(self, text: str) -> str:
        if not self._seen:
            core = text.lstrip()
            if core:
                self._seen = True
            if self._strip_leading:
                text = core
        if not self._hold_trailing or not text:
            return text
        text = self._held + text
        core = text.rstrip()
        self._held = text[len(core) :]
        return core

    def take_held(self) -> str:
        """The whitespace held back so far (and forget it)."""
        held, self._held = self._held, ""
        return held


class DeltaSink:
    """Collects one step's output; numbers calls and gives them ids."""

    __slots__ = ("_calls", "_id_factory", "_next_index", "_normal", "_reasoning")

    def __init__(self, id_factory: IdFactory | None = None) -> None:
        self._id_factory = id_factory or default_call_id
        self._normal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[CallDelta] = []
        self._next_index = 0

    def normal(self, text: str) -> None:
        if text:
            self._normal.append(text)

    def reasoning(self, text: str) -> None:
        if text:
            self._reasoning.append(text)

    def begin_call(self, name: str, arguments: str = "") -> int:
        """Open the next call (id + name, optionally its first arguments); returns its index."""
        index = self._next_index
        self._next_index += 1
        self._calls.append(CallDelta(index, self._id_factory(index), name, arguments))
        return index

    def take(self) -> ParseDelta:
        if not (self._normal or self._reasoning or self._calls):
            return ParseDelta()
        delta = ParseDelta("".join(self._normal), "".join(self._reasoning), tuple(self._calls))
        self._normal, self._reasoning, self._calls = [], [], []
        return delta


class StreamParser:
    """Base class of every format: a marker-driven state machine over the shared scanner.

    Subclasses override the hooks below and write output through `self.out`. They must keep
    every decision a function of the text seen so far (never of chunk boundaries); the scanner's
    hold-back makes that automatic for marker decisions. If `on_text` changes the live marker set,
    a marker that followed the text is rescanned under the new set; text the new set should see
    must be handed back with `unread`.
    """

    def __init__(self, *, id_factory: IdFactory | None = None) -> None:
        self.out = DeltaSink(id_factory)
        self._scanner = MarkerScanner()
        self._pushback = ""
        self._finished = False

    # -- hooks -----------------------------------------------------------------------------
    def active_markers(self) -> Markers:
        """The markers recognised in the current state."""
        return NO_MARKERS

    def on_text(self, text: str) -> None:
        """Plain text (no live marker in it). Chunking may split it anywhere."""
        self.out.normal(text)

    def on_marker(self, marker: str) -> None:
        """A complete live marker."""

    def on_finish(self) -> None:
        """End of stream, after every buffered character went through `on_text`/`on_marker`."""

    # -- helpers for subclasses ------------------------------------------------------------
    def unread(self, text: str) -> None:
        """Give text back to the scanner (from inside `on_text`/`on_marker`).

        It is rescanned with the live markers of the new state, so a format can switch state in
        the middle of a text event: handle the head, `unread` the rest, change state. If called
        from `on_text`, the marker that followed the text (if any) is put back after it, unseen.
        """
        self._pushback = text + self._pushback

    # -- the Parser protocol ---------------------------------------------------------------
    def feed(self, text: str) -> ParseDelta:
        if self._finished:
            raise RuntimeError("feed() after finish(): a parser serves one response")
        self._scanner.push(text)
        self._drain(final=False)
        return self.out.take()

    def finish(self) -> ParseDelta:
        if self._finished:
            return ParseDelta()
        self._drain(final=True)
        self._finished = True
        self.on_finish()
        return self.out.take()

    def parse(self, text: str) -> ParseResult:
        return aggregate((self.feed(text), self.finish()))

    def _drain(self, final: bool) -> None:
        scanner = self._scanner
        while True:
            markers = self.active_markers()
            event = scanner.next_event(markers, final)
            if event is None:
                return
            text, marker = event
            if text:
                self.on_text(text)
                if self._pushback:
                    scanner.unread(self._pushback + marker)
                    self._pushback = ""
                    continue
                if marker and self.active_markers() is not markers:
                    # The text changed the state: the marker must be judged by the new set.
                    scanner.unread(marker)
                    continue
            if marker:
                self.on_marker(marker)
                if self._pushback:
                    scanner.unread(self._pushback)
                    self._pushback = ""


class ToolParserBase(StreamParser):
    """Base for tool-call formats: keeps the request's tools (name -> JSON-schema parameters).

    Calls to names outside `tools` are still returned (the client decides); the schemas are
    there for formats that need parameter types (e.g. XML-style arguments).
    """

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(id_factory=id_factory)
        self.tool_schemas: dict[str, dict] = dict(_tool_schemas(tools or ()))


def _tool_schemas(tools: Iterable[dict]) -> Iterable[tuple[str, dict]]:
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            yield fn["name"], params if isinstance(params, dict) else {}


class PassthroughParser(ToolParserBase):
    """No parsing: everything is normal text, immediately. The fallback for unknown names."""

    def __init__(
        self,
        tools: list[dict] | None = None,
        *,
        id_factory: IdFactory | None = None,
        start_in_reasoning: bool = False,
    ) -> None:
        super().__init__(tools, id_factory=id_factory)


class ChainedParser:
    """Reasoning first, then tool calls on its normal text: the gateway's full gRPC parse."""

    def __init__(self, reasoning: StreamParser, tools: StreamParser) -> None:
        self._reasoning = reasoning
        self._tools = tools

    def feed(self, text: str) -> ParseDelta:
        first = self._reasoning.feed(text)
        second = self._tools.feed(first.normal_text) if first.normal_text else ParseDelta()
        return _merge(first.reasoning_text, second)

    def finish(self) -> ParseDelta:
        first = self._reasoning.finish()
        fed = self._tools.feed(first.normal_text) if first.normal_text else ParseDelta()
        done = self._tools.finish()
        both = ParseDelta(fed.normal_text + done.normal_text, "", fed.calls + done.calls)
        return _merge(first.reasoning_text, both)

    def parse(self, text: str) -> ParseResult:
        return aggregate((self.feed(text), self.finish()))


def _merge(reasoning: str, tools: ParseDelta) -> ParseDelta:
    if not reasoning:
        return tools
    return ParseDelta(tools.normal_text, reasoning + tools.reasoning_text, tools.calls)
