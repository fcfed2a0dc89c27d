"""GLM-4.7 MoE tool calls (`glm47_moe`) (pure).

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>

The GLM-4.5 format (`glm45_moe.py`) without the line structure: the name is the first run of
characters that are neither whitespace nor `<` (optional whitespace around it), so it may be
followed directly by `<arg_key>`. Everything else (pairs, typing, fallbacks) is shared.
"""

from __future__ import annotations

import re

from smg.pipeline.parsers.glm45_moe import Glm45MoeParser

_NAME = re.compile(r"\s*([^<\s]*)")


class Glm47MoeParser(Glm45MoeParser):
    """`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`."""

    def split_name(self, body: str) -> tuple[str, str]:
        m = _NAME.match(body)
        assert m is not None  # the pattern matches the empty string
        return m.group(1), body[m.end() :]
