"""MiniMax-M2 tool calls (`minimax_m2`) (pure).

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Oslo</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    <invoke name="get_time">
    <parameter name="zone">CET</parameter>
    </invoke>
    </minimax:tool_call>

A wrapper holds one or more `<invoke>` calls (parallel calls share one wrapper). Values are typed
by the tool's schema (`xml_values`) after decoding the five XML entities (`&lt;` ...); a
declared string is kept exactly as written (no trimming), as in the Rust gateway. A wrapper
left open at the end of the stream counts if every invoke in it closed.
"""

from __future__ import annotations

from smg.pipeline.parsers.xml_block import Call, NamedInvoke, XmlBlockParser
from smg.pipeline.parsers.xml_values import ValueStyle, keep

_INVOKE = NamedInvoke("invoke", "parameter")


class MinimaxM2Parser(XmlBlockParser):
    """`<minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>...`."""

    OPEN = "<minimax:tool_call>"
    CLOSE = "</minimax:tool_call>"
    STYLE = ValueStyle(strip_string=keep, strip_other=keep, decode_entities=True)

    def parse_block(self, body: str, closed: bool) -> list[Call] | None:
        calls: list[Call] = []
        pos = 0
        while (invoke := _INVOKE.match(body, pos)) is not None:
            name, pairs, pos = invoke
            calls.append(self.make_call(name, pairs))
        return calls if calls and not body[pos:].strip() else None
