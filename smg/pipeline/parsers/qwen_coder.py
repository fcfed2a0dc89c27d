"""Qwen3-Coder / Qwen3.5 XML tool calls (`qwen_coder`, alias `qwen_xml`) (pure).

    Let me check.
    <tool_call>
    <function=read_file>
    <parameter=path>
    src/main.rs
    </parameter>
    <parameter=max_lines>
    40
    </parameter>
    </function>
    </tool_call>

Values are typed by the tool's schema (`xml_values`); one structural line break is dropped at
each edge of a value, other whitespace is kept, and entities are not decoded (the format is not
HTML-escaped). As in the Rust gateway, missing `</parameter>` / `</function>` fences inside a
closed block are tolerated (a value then ends at the next tag), and a block may hold several
functions. A block left open at the end of the stream counts only if its functions all closed.
"""

from __future__ import annotations

from smg.pipeline.parsers.xml_block import Call, XmlBlockParser
from smg.pipeline.parsers.xml_values import ValueStyle, strip_one_line_break

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"
_VALUE_ENDS = (PARAM_CLOSE, PARAM_OPEN, FUNCTION_CLOSE)


class QwenCoderParser(XmlBlockParser):
    """`<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>`."""

    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"
    STYLE = ValueStyle(strip_string=strip_one_line_break, strip_other=strip_one_line_break)

    def parse_block(self, body: str, closed: bool) -> list[Call] | None:
        calls: list[Call] = []
        pos = _skip_ws(body, 0)
        while pos < len(body):
            parsed = _parse_function(body, pos)
            if parsed is None:
                return None
            name, pairs, pos, fenced = parsed
            if not fenced and not closed:
                return None  # cut off mid-function: do not invent the rest
            calls.append(self.make_call(name, pairs))
            pos = _skip_ws(body, pos)
        return calls or None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _tag_name(text: str, pos: int, prefix: str) -> tuple[str, int] | None:
    """`<prefix NAME>` at `pos` -> (trimmed NAME, position after `>`)."""
    if not text.startswith(prefix, pos):
        return None
    end = text.find(">", pos + len(prefix))
    if end < 0:
        return None
    name = text[pos + len(prefix) : end].strip()
    return (name, end + 1) if name else None


def _parse_function(body: str, pos: int) -> tuple[str, list[tuple[str, str]], int, bool] | None:
    """One function at `pos` -> (name, raw pairs, end position, closed by `</function>`)."""
    head = _tag_name(body, pos, FUNCTION_OPEN)
    if head is None:
        return None
    name, pos = head
    pairs: list[tuple[str, str]] = []
    while True:
        pos = _skip_ws(body, pos)
        if pos >= len(body):
            return name, pairs, pos, False
        if body.startswith(FUNCTION_CLOSE, pos):
            return name, pairs, pos + len(FUNCTION_CLOSE), True
        param = _tag_name(body, pos, PARAM_OPEN)
        if param is None:
            return None
        key, pos = param
        ends = [(i, tag) for tag in _VALUE_ENDS if (i := body.find(tag, pos)) >= 0]
        end, tag = min(ends) if ends else (len(body), "")
        pairs.append((key, body[pos:end]))
        pos = end + len(PARAM_CLOSE) if tag == PARAM_CLOSE else end
