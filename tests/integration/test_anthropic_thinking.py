"""`reasoning_effort` through an Anthropic provider worker: the stand-in (Anthropic's wire
format: `thinking: {type: enabled, budget_tokens}`, its 400s for a budget under 1024 or not under
max_tokens) is sent extended thinking with the effort's budget, and its thinking blocks come back
as `reasoning_content`, whole and streamed (thinking_delta). The Messages surface's thinking
switch reaches it the same way, and comes back as thinking blocks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from .conftest import Gateway, Launcher, Sim, http

KEY = "sk-worker"
SAY = [{"role": "user", "content": "SIM_REPLY: <think>Two and two.</think>It is four."}]


@dataclass
class Setup:
    sim: Sim
    gw: Gateway
    client: openai.OpenAI


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    sim = module_launch.provider("anthropic", "claude-x", provider_keys=[KEY])
    gw = module_launch.gateway([sim], backend="anthropic", worker_api_key=KEY)
    with gw.client() as client:
        yield Setup(sim, gw, client)


def last_request(sim: Sim) -> dict[str, Any]:
    return http("GET", sim.url + "/sim/requests").json()["requests"][-1]


def test_reasoning_effort_is_thinking_with_its_budget(setup: Setup) -> None:
    answer = setup.client.chat.completions.create(
        model="claude-x", messages=SAY, reasoning_effort="low"
    )
    message = answer.choices[0].message
    assert message.content == "It is four."
    assert (message.model_extra or {})["reasoning_content"] == "Two and two."
    sent = last_request(setup.sim)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["max_tokens"] == 1024 + 4096


def test_streamed_thinking_is_reasoning_content(setup: Setup) -> None:
    chunks = list(
        setup.client.chat.completions.create(
            model="claude-x", messages=SAY, reasoning_effort="medium", max_tokens=3000, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert reasoning == "Two and two."
    assert "".join(d.content or "" for d in deltas) == "It is four."
    sent = last_request(setup.sim)  # the limit is under medium's 8192: the budget is cut to it
    assert (sent["max_tokens"], sent["thinking"]["budget_tokens"]) == (3000, 2999)


def test_without_reasoning_no_thinking_and_a_bad_effort_is_a_400(setup: Setup) -> None:
    answer = setup.client.chat.completions.create(model="claude-x", messages=SAY)
    assert answer.choices[0].message.content == "It is four."
    assert (answer.choices[0].message.model_extra or {}).get("reasoning_content") is None
    assert "thinking" not in last_request(setup.sim)
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.chat.completions.create(
            model="claude-x", messages=SAY, reasoning_effort="low", max_tokens=500
        )
    assert info.value.code == "unsupported_parameter"
    assert (info.value.body or {}).get("param") == "max_tokens"  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_thinking_over_an_anthropic_worker(setup: Setup, stream: bool) -> None:
    with anthropic.Anthropic(base_url=setup.gw.url, api_key="x", max_retries=0) as c:
        ask: dict[str, Any] = {
            "model": "claude-x",
            "max_tokens": 2048,
            "messages": SAY,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        }
        if stream:
            with c.messages.stream(**ask) as s:
                msg = s.get_final_message()
        else:
            msg = c.messages.create(**ask)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == "Two and two."  # type: ignore[union-attr]
    assert msg.content[1].text == "It is four."  # type: ignore[union-attr]
    assert last_request(setup.sim)["thinking"]["type"] == "enabled"
