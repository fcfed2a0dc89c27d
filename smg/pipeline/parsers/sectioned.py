"""Token-delimited call sections: the engine shared by DeepSeek and Kimi K2 (pure).

    text <SECTION_BEGIN> <CALL_BEGIN> body <CALL_END> <CALL_BEGIN> body <CALL_END> <SECTION_END>

The format supplies its five markers and a `parse_body` function (body text -> name + canonical
arguments, or None). Text outside sections is content, streamed at once; whitespace touching a
section is dropped. Each call is emitted when it closes. A call whose body does not parse is
returned verbatim as content (markers included); so is the section opener, the whitespace in the
section and its end marker when the section produced no call. A call is also closed by the next
`CALL_BEGIN`, by `SECTION_END` or by the end of the stream (the end markers are often stop
strings); non-space text inside a section, between calls, is content.
"""

from __future__ import annotations

from smg.pipeline.parsers.engine import Markers, ToolParserBase, WsTrim
from smg.pipeline.parsers.json_calls import loads_strict
from smg.pipeline.parsers.types import IdFactory, canonical_json

_TEXT, _SECTION, _CALL = 0, 1, 2


class SectionFormat:
    """The markers of one sectioned format, with the scanner tables built once."""

    __slots__ = ("call_begin", "call_end", "in_call", "in_section", "in_text", "section_end")

    def __init__(
        self, section_begin: str, section_end: str, call_begin: str, call_end: str
    ) -> None:
        self.section_end = section_end
        self.call_begin = call_begin
        self.call_end = call_end
        self.in_text = Markers(section_begin)
        self.in_section = Markers(call_begin, section_end)
        self.in_call = Markers(call_end, call_begin, section_end)


def json_object_args(text: str) -> str | None:
    """A JSON object (optionally in a ```json fence) -> canonical arguments, or None."""
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        if text.startswith("json"):
            text = text[4:]
        if text.endswith("```"):
            text = text[:-3]
    try:
        value = loads_strict(text.strip())
    except ValueError:
        return None
    return canonical_json(value) if isinstance(value, dict) else None


def plain_name(text: str) -> str | None:
    """A function name: non-empty after stripping, with no whitespace inside."""
    name = text.strip()
    return name if name and not any(ch.isspace() for ch in name) else None


class SectionedParser(ToolParserBase):
    """State machine over `SectionFormat` markers; subclasses set `FORMAT` and `parse_body`."""

    FORMAT: SectionFormat

    def __init__(
        self, tools: list[dict] | None = None, *, id_factory: IdFactory | None = None
    ) -> None:
        super().__init__(tools, id_factory=id_factory)
        self._state = _TEXT
        self._trim = WsTrim(hold_trailing=True)
        self._pending = ""  # section text not yet emitted or dropped (opener, whitespace)
        self._section_calls = 0
        self._body: list[str] = []

    def parse_body(self, body: str) -> tuple[str, str] | None:
        raise NotImplementedError

    def active_markers(self) -> Markers:
        fmt = self.FORMAT
        if self._state == _TEXT:
            return fmt.in_text
        return fmt.in_section if self._state == _SECTION else fmt.in_call

    def on_text(self, text: str) -> None:
        if self._state == _TEXT:
            self.out.normal(self._trim.feed(text))
        elif self._state == _CALL:
            self._body.append(text)
        else:  # stray text between calls: content; trailing whitespace waits for what follows
            core = text.rstrip()
            if core:
                self.out.normal(self._pending + core)
                self._pending = ""
            self._pending += text[len(core) :]

    def on_marker(self, marker: str) -> None:
        fmt = self.FORMAT
        if self._state == _TEXT:  # the section opener
            self._pending = self._trim.take_held() + marker
            self._section_calls = 0
            self._state = _SECTION
            return
        if self._state == _CALL:
            self._close_call(marker if marker == fmt.call_end else "")
        if marker == fmt.call_begin:
            self._state, self._body = _CALL, []
        elif marker == fmt.section_end:
            self._close_section(marker)

    def on_finish(self) -> None:
        if self._state == _CALL:
            self._close_call("")
        if self._state == _SECTION:
            self._close_section("")
        self.out.normal(self._trim.take_held())

    def _close_call(self, closer: str) -> None:
        body = "".join(self._body)
        self._state, self._body = _SECTION, []
        call = self.parse_body(body)
        if call is None:
            self.out.normal(self._pending + self.FORMAT.call_begin + body + closer)
        else:
            self.out.begin_call(*call)
            self._section_calls += 1
        self._pending = ""

    def _close_section(self, closer: str) -> None:
        self._state = _TEXT
        if self._section_calls:
            self._trim = WsTrim(strip_leading=True, hold_trailing=True)
        else:
            self.out.normal(self._pending + closer)
            self._trim = WsTrim(hold_trailing=True)
        self._pending = ""
