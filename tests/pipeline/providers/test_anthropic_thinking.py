"""`reasoning_effort` (and the Messages surface's `chat_template_kwargs.enable_thinking`) to an
Anthropic worker: extended thinking with the documented budget per effort, max_tokens covering
it; the answer's thinking back as `reasoning_content`, whole and streamed."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from smg.pipeline.providers import provider
from smg.pipeline.providers.anthropic_request import (
    DEFAULT_MAX_TOKENS,
    THINKING_BUDGET,
    messages_body,
)
from smg.pipeline.providers.base import ProviderRequestError

SAY = [{"role": "user", "content": "why?"}]


def body(**fields: Any) -> dict[str, Any]:
    return messages_body({"model": "claude", "messages": SAY, **fields}, stream=False)


@pytest.mark.parametrize(
    ("effort", "budget"), [("minimal", 1024), ("low", 1024), ("medium", 8192), ("high", 24576)]
)
def test_each_effort_has_its_budget(effort: str, budget: int) -> None:
    out = body(reasoning_effort=effort)
    assert THINKING_BUDGET[effort] == budget
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["max_tokens"] == budget + DEFAULT_MAX_TOKENS  # room to answer after thinking


def test_no_thinking_asked_or_none() -> None:
    for fields in ({}, {"reasoning_effort": "none"}, {"chat_template_kwargs": {}},
                   {"chat_template_kwargs": {"enable_thinking": False, "other": 1}}):  # fmt: skip
        out = body(**fields)
        assert "thinking" not in out and out["max_tokens"] == DEFAULT_MAX_TOKENS


def test_the_template_switch_thinks_at_the_medium_budget() -> None:
    out = body(chat_template_kwargs={"enable_thinking": True}, max_tokens=20000)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert out["max_tokens"] == 20000
    # reasoning_effort says how much, whatever the template switch says
    out = body(chat_template_kwargs={"enable_thinking": True}, reasoning_effort="high")
    assert out["thinking"]["budget_tokens"] == 24576


def test_a_limit_under_the_budget_cuts_it_or_is_a_400() -> None:
    out = body(reasoning_effort="high", max_completion_tokens=5000)
    assert (out["max_tokens"], out["thinking"]["budget_tokens"]) == (5000, 4999)
    out = body(reasoning_effort="low", max_tokens=1025)
    assert out["thinking"]["budget_tokens"] == 1024
    for limit in (1024, 64):
        with pytest.raises(ProviderRequestError) as info:
            body(reasoning_effort="low", max_tokens=limit)
        assert info.value.param == "max_tokens"


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"reasoning_effort": "extreme"}, "reasoning_effort"),
     ({"chat_template_kwargs": "yes"}, "chat_template_kwargs")],
)  # fmt: skip
def test_bad_values_are_named(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ProviderRequestError) as info:
        body(**fields)
    assert info.value.param == param


def test_thinking_comes_back_as_reasoning_content_whole_and_streamed() -> None:
    vendor = provider("anthropic", time.time)
    msg = {"id": "msg_1", "type": "message", "model": "claude", "stop_reason": "end_turn",
           "content": [{"type": "thinking", "thinking": "Hmm, ", "signature": "s"},
                       {"type": "thinking", "thinking": "yes.", "signature": "t"},
                       {"type": "text", "text": "Because."}],
           "usage": {"input_tokens": 5, "output_tokens": 7}}  # fmt: skip
    status, raw = vendor.chat_answer(200, orjson.dumps(msg))
    message = orjson.loads(raw)["choices"][0]["message"]
    assert (status, message["reasoning_content"], message["content"]) == (
        200,
        "Hmm, yes.",
        "Because.",
    )
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "Hmm, "}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "yes."}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "s"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "text_delta", "text": "Because."}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]  # fmt: skip
    stream = vendor.chat_stream("claude")
    wire = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    out = stream.feed(wire) + stream.close()
    deltas = [orjson.loads(f[6:])["choices"][0]["delta"] for f in out.split(b"\n\n")
              if f.startswith(b"data: {")]  # fmt: skip
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Hmm, yes."
    assert "".join(d.get("content") or "" for d in deltas) == "Because."
