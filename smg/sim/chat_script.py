"""Scripted chat answers of the simulated HTTP worker (pure; no IO).

The gRPC engine's script (smg.sim.script) works on the decoded prompt; an HTTP worker gets chat
messages, so here the same two rules read them: the last user message's text after `SIM_REPLY:`
is the reply (unless tool outputs came after it), else the first `--script` rule whose `when`
occurs in any message's text (tool outputs included). The reply is then answered as a vLLM
server with a reasoning parser and a tool parser would: `<think>...</think>` becomes
`reasoning_content`, and when the request offers `tools`, each
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block becomes one of the message's
`tool_calls` (finish reason `tool_calls`); the rest is `content`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from smg.sim.script import MAGIC, Script

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass(frozen=True, slots=True)
class ScriptedAnswer:
    content: str | None
    reasoning: str | None
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str
    text: str  # the whole reply (what the token counts are taken from)


def scripted_reply(body: dict[str, Any], script: Script) -> str | None:
    """The exact reply this chat request is scripted to get, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    # the last turn the model answers: a user's, or tool outputs (a chat template renders those
    # as a user turn too); only a user's own words can script the reply
    turns = [m for m in messages if isinstance(m, dict) and m.get("role") in ("user", "tool")]
    if turns and turns[-1].get("role") == "user" and script.magic:
        last = _text(turns[-1].get("content"))
        at = last.find(MAGIC)
        if at >= 0:
            reply = last[at + len(MAGIC) :]
            return reply[1:] if reply.startswith(" ") else reply
    said = "\n".join(_text(m.get("content")) for m in messages if isinstance(m, dict))
    for rule in script.rules:
        if rule.when in said:
            return rule.reply
    return None


def answer(reply: str, tools: bool, call_tag: str) -> ScriptedAnswer:
    """The message a reasoning- and tool-parsing server makes of `reply`."""
    reasoning = "".join(m.group(1).strip("\n") for m in _THINK.finditer(reply)) or None
    rest = _THINK.sub("", reply)
    calls: list[dict[str, Any]] = []
    if tools:
        for k, match in enumerate(_CALL.finditer(rest)):
            try:
                said = json.loads(match.group(1))
            except json.JSONDecodeError:
                continue
            if not isinstance(said, dict) or not isinstance(said.get("name"), str):
                continue
            calls.append(
                {
                    "id": f"call_{call_tag}{k}",
                    "type": "function",
                    "function": {
                        "name": said["name"],
                        "arguments": json.dumps(said.get("arguments", {})),
                    },
                }
            )
        if calls:
            rest = _CALL.sub("", rest)
    content = rest.strip() or None
    finish = "tool_calls" if calls else "stop"
    return ScriptedAnswer(content, reasoning, tuple(calls), finish, reply)


def stream_deltas(scripted: ScriptedAnswer) -> Iterator[dict[str, Any]]:
    """The `delta`s of a streamed answer, after the role chunk: reasoning, content, each call."""
    if scripted.reasoning:
        yield {"reasoning_content": scripted.reasoning}
    if scripted.content:
        yield {"content": scripted.content}
    for k, call in enumerate(scripted.tool_calls):
        yield {"tool_calls": [{"index": k, **call}]}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""
