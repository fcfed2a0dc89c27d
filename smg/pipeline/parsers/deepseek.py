"""DeepSeek V3 and V3.1 tool calls: full-width special-token sections (pure).

V3 (`deepseek`), arguments in a ```json fence after a `function` type tag and the name:

    <|tool_calls_begin|><|tool_call_begin|>function<|tool_sep|>get_tide
    ```json
    {"port": "Brest"}
    ```<|tool_call_end|><|tool_calls_end|>

V3.1 (`deepseek31`), the name then the bare JSON arguments:

    <|tool_calls_begin|><|tool_call_begin|>get_tide<|tool_sep|>{"port": "Brest"}<|tool_call_end|>

Shown here in ASCII: in the real markers (the constants below) each `|` is U+FF5C (fullwidth
vertical line) and each `_` is U+2581 (lower one eighth block). Section handling (text,
whitespace, malformed calls) is `sectioned.py`. The ```json fence is optional for V3 and
tolerated for V3.1. Arguments must be a JSON object: the Rust gateway wraps any other JSON value
as `{"value": ...}`, we return such a call as content instead.
"""

from __future__ import annotations

from smg.pipeline.parsers.sectioned import (
    SectionedParser,
    SectionFormat,
    json_object_args,
    plain_name,
)

CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
SEP = "<\uff5ctool\u2581sep\uff5c>"
_FORMAT = SectionFormat(CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END)


class DeepSeekV3Parser(SectionedParser):
    """`function` SEP NAME, newline, then the arguments in a ```json fence."""

    FORMAT = _FORMAT

    def parse_body(self, body: str) -> tuple[str, str] | None:
        kind, sep, rest = body.partition(SEP)
        if not sep or kind.strip() != "function":
            return None
        name_line, _, args_text = rest.partition("\n")
        name = plain_name(name_line)
        args = json_object_args(args_text)
        return (name, args) if name is not None and args is not None else None


class DeepSeekV31Parser(SectionedParser):
    """NAME SEP then the bare JSON arguments."""

    FORMAT = _FORMAT

    def parse_body(self, body: str) -> tuple[str, str] | None:
        name_text, sep, args_text = body.partition(SEP)
        name = plain_name(name_text) if sep else None
        args = json_object_args(args_text)
        return (name, args) if name is not None and args is not None else None
