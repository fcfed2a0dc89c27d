"""Step-3 tool calls (`step3`) (pure).

    <|tool_calls_begin|><|tool_call_begin|>function<|tool_sep|><steptml:invoke name="f">
    <steptml:parameter name="city">Oslo</steptml:parameter>
    </steptml:invoke><|tool_call_end|><|tool_calls_end|>

Every `|` in these markers is really U+FF5C (fullwidth vertical line), as in DeepSeek's. One
`<|tool_calls_begin|>` section holds one or more `<|tool_call_begin|>TYPE<|tool_sep|>INVOKE
<|tool_call_end|>` calls; the type must be `function`. Values are typed by the tool's schema
(`xml_values`) and trimmed, strings included (as the Rust gateway does). A section left open at
the end of the stream counts if every call in it closed.
"""

from __future__ import annotations

import re

from smg.pipeline.parsers.xml_block import Call, NamedInvoke, XmlBlockParser
from smg.pipeline.parsers.xml_values import ValueStyle, strip_all

CALLS_BEGIN = "<\uff5ctool_calls_begin\uff5c>"
CALLS_END = "<\uff5ctool_calls_end\uff5c>"
CALL_BEGIN = "<\uff5ctool_call_begin\uff5c>"
CALL_END = "<\uff5ctool_call_end\uff5c>"
SEP = "<\uff5ctool_sep\uff5c>"

_HEAD = re.compile(rf"\s*{re.escape(CALL_BEGIN)}\s*function\s*{re.escape(SEP)}")
_TAIL = re.compile(rf"\s*{re.escape(CALL_END)}")
_INVOKE = NamedInvoke("steptml:invoke", "steptml:parameter")


class Step3Parser(XmlBlockParser):
    """Sections of `<steptml:invoke>` calls between the Step-3 tool-call markers."""

    OPEN = CALLS_BEGIN
    CLOSE = CALLS_END
    STYLE = ValueStyle(strip_string=strip_all, strip_other=strip_all)

    def parse_block(self, body: str, closed: bool) -> list[Call] | None:
        calls: list[Call] = []
        pos = 0
        while (head := _HEAD.match(body, pos)) is not None:
            invoke = _INVOKE.match(body, head.end())
            tail = _TAIL.match(body, invoke[2]) if invoke is not None else None
            if invoke is None or tail is None:
                return None
            name, pairs, _ = invoke
            calls.append(self.make_call(name, pairs))
            pos = tail.end()
        return calls if calls and not body[pos:].strip() else None
