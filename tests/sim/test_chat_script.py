"""The HTTP worker's scripted chat answers: which reply a chat request gets, and the message a
reasoning- and tool-parsing server makes of it."""

from __future__ import annotations

import json

import pytest

from smg.sim.chat_script import answer, scripted_reply, stream_deltas
from smg.sim.script import Script, ScriptRule

pytestmark = pytest.mark.unit
RULES = Script((ScriptRule("echo: ping", "Done."),))


def chat(*messages: tuple[str, str]) -> dict[str, object]:
    return {"messages": [{"role": r, "content": c} for r, c in messages]}


def test_the_last_user_message_scripts_the_reply_until_tool_outputs_follow_it() -> None:
    asked = chat(("system", "x"), ("user", "go SIM_REPLY: hello there"))
    assert scripted_reply(asked, RULES) == "hello there"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "SIM_REPLY:hi"}]}]}
    assert scripted_reply(parts, RULES) == "hi"
    after = chat(("user", "SIM_REPLY: call"), ("assistant", ""), ("tool", "echo: ping"))
    assert scripted_reply(after, RULES) == "Done."  # a rule, matched in the tool's output
    assert scripted_reply(chat(("user", "plain")), RULES) is None
    assert scripted_reply({"messages": "nope"}, RULES) is None


def test_tool_calls_and_reasoning_are_parsed_as_a_server_with_parsers_would() -> None:
    reply = (
        "<think>\nweigh it\n</think>\nLooking.\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\nnot json\n</tool_call>'
    )
    said = answer(reply, tools=True, call_tag="t")
    assert said.reasoning == "weigh it" and said.finish_reason == "tool_calls"
    assert [c["function"]["name"] for c in said.tool_calls] == ["add"]
    assert json.loads(said.tool_calls[0]["function"]["arguments"]) == {"a": 1}
    assert said.content == "Looking."  # the call blocks are not content
    deltas = list(stream_deltas(said))
    assert [next(iter(d)) for d in deltas] == ["reasoning_content", "content", "tool_calls"]
    plain = answer(reply, tools=False, call_tag="t")  # no tools offered: all of it is content
    assert (
        plain.tool_calls == ()
        and plain.finish_reason == "stop"
        and "<tool_call>" in (plain.content or "")
    )
