"""`POST /v1/messages` in HTTP mode: the official `anthropic` SDK -> gateway -> an HTTP worker (the
HTTP simulator) that serves chat completions only. The gateway sends it the chat body and reads
its answer (content, reasoning_content, tool_calls) back into the same message and events as
token mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from support.messages_cases import WEATHER, think_and_call

from .conftest import Launcher, Sim

MODEL = "http-only-model"


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim(MODEL)


@pytest.fixture(scope="module")
def client(module_launch: Launcher, sim: Sim) -> Iterator[anthropic.Anthropic]:
    gw = module_launch.gateway([sim])
    with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20.0) as c:
        yield c


def comparable(message: Any) -> dict[str, Any]:
    body = message.model_dump(exclude_none=True)
    body.pop("id")
    return body


def test_a_tool_use_round_trip_whole_and_streamed_alike(client: anthropic.Anthropic) -> None:
    kwargs = think_and_call(MODEL)
    whole = client.messages.create(**kwargs)
    assert [b.type for b in whole.content] == ["thinking", "text", "tool_use"]
    thinking, text, call = whole.content
    assert thinking.type == "thinking" and "The user wants the weather." in thinking.thinking
    assert text.type == "text" and text.text.strip() == "Let me look."
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Oslo"}
    assert whole.stop_reason == "tool_use"
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0

    with client.messages.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert comparable(final) == comparable(whole)

    second = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"role": "assistant", "content": whole.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "5C"},
                    {"type": "text", "text": "SIM_REPLY: It is 5C in Oslo."},
                ],
            },
        ],
    )
    assert second.content[0].type == "text" and second.content[0].text == "It is 5C in Oslo."
    assert second.stop_reason == "end_turn"


def test_max_tokens_and_count_tokens_without_a_tokenizer(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "Talk."}]
    )
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    body = info.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error"
    assert "tokenizer" in body["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_worker_error_reaches_the_client_in_anthropics_shape(
    client: anthropic.Anthropic, sim: Sim, stream: bool
) -> None:
    sim.configure(status_override=400)
    try:
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(
                model=MODEL,
                max_tokens=10,
                messages=[{"role": "user", "content": "hi"}],
                stream=stream,
            )
    finally:
        sim.configure(status_override=None)
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"] == {"type": "invalid_request_error", "message": "Simulated status 400"}
    assert info.value.response.headers["X-SMG-Error-Code"] == "sim_status_override"
