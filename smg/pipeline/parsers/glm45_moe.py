"""GLM-4.5 / GLM-4.6 MoE tool calls (`glm45_moe`) (pure).

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Oslo</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

One call per block: the function name is the first line, then `<arg_key>`/`<arg_value>` pairs
(whitespace between tags is ignored, anything else makes the block malformed). Values are typed
by the tool's schema (`xml_values`): a declared string is kept exactly as written, other values
are trimmed first. A block without `</tool_call>` at the end of the stream is content (the
format has no other sign that the call is complete). GLM-4.7 differs only in how the name ends
(`glm47_moe.py`).
"""

from __future__ import annotations

import re

from smg.pipeline.parsers.xml_block import Call, XmlBlockParser
from smg.pipeline.parsers.xml_values import ValueStyle, keep, strip_all

_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


class Glm45MoeParser(XmlBlockParser):
    """`<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...</tool_call>`."""

    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"
    STYLE = ValueStyle(strip_string=keep, strip_other=strip_all)

    def split_name(self, body: str) -> tuple[str, str]:
        """(name, argument text): the name is the first line."""
        head, _, rest = body.partition("\n")
        return head.strip(), rest

    def parse_block(self, body: str, closed: bool) -> list[Call] | None:
        if not closed:
            return None
        name, rest = self.split_name(body)
        if not name or "<" in name:
            return None
        pairs = _arg_pairs(rest)
        return None if pairs is None else [self.make_call(name, pairs)]


def _arg_pairs(text: str) -> list[tuple[str, str]] | None:
    pairs: list[tuple[str, str]] = []
    pos = 0
    while (m := _PAIR.match(text, pos)) is not None:
        key = m.group(1).strip()
        if not key:
            return None
        pairs.append((key, m.group(2)))
        pos = m.end()
    return pairs if not text[pos:].strip() else None
