"""Kimi K2 tool calls: `functions.NAME:IDX` headers in a token-delimited section (pure).

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_tide:0<|tool_call_argument_begin|>
    {"port": "Brest"}<|tool_call_end|><|tool_calls_section_end|>

The header is `functions.NAME:IDX` (the `functions.` prefix is optional, as in the Rust gateway);
NAME may hold letters, digits, `_`, `.` and `-`. Section handling (text, whitespace, malformed
calls) is `sectioned.py`.

Call ids: Kimi's own id (`functions.NAME:IDX`) is not used. Like the Rust gateway we give every
call the request-scoped id from the id factory: IDX restarts at 0 each turn, so Kimi's ids would
repeat across the turns of one conversation, which OpenAI clients do not expect.
"""

from __future__ import annotations

import re

from smg.pipeline.parsers.sectioned import SectionedParser, SectionFormat, json_object_args

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_FORMAT = SectionFormat(SECTION_BEGIN, SECTION_END, CALL_BEGIN, CALL_END)
_HEADER = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")


class KimiK2Parser(SectionedParser):
    """`functions.NAME:IDX<|tool_call_argument_begin|>{...}` call bodies."""

    FORMAT = _FORMAT

    def parse_body(self, body: str) -> tuple[str, str] | None:
        header, sep, args_text = body.partition(ARGUMENT_BEGIN)
        found = _HEADER.fullmatch(header.strip()) if sep else None
        args = json_object_args(args_text)
        return (found.group(1), args) if found is not None and args is not None else None
