"""`POST /v1/messages` end to end: the official `anthropic` SDK (`client.messages.create`, and
`client.messages.stream` with its own event accumulator) -> gateway (gRPC mode) -> a simulated
Qwen3 engine that answers exactly the text after `SIM_REPLY:` (one token per message). The model
name detects the qwen3 reasoning parser and the qwen tool-call parser; the gateway loads the
bundled Qwen3 tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from support.messages_cases import THINK_AND_CALL, THINKING, WEATHER, think_and_call

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Engine, Gateway, Launcher, http

MODEL = "Qwen3-8B-sim"


@dataclass
class Setup:
    gw: Gateway
    client: anthropic.Anthropic
    engine: Engine


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    engine = module_launch.engine(MODEL, "vllm", chunk_tokens=1)
    gw = module_launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir())
    with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20.0) as client:
        yield Setup(gw, client, engine)


def comparable(message: Any) -> dict[str, Any]:
    """A message without what differs between two runs (ids; what the engine's cache held)."""
    body = message.model_dump(exclude_none=True)
    body.pop("id")
    usage = body["usage"]
    usage["input_tokens"] += usage.pop("cache_read_input_tokens")
    for block in body["content"]:
        block.pop("id", None)
    return body


def test_a_text_answer(setup: Setup) -> None:
    msg = setup.client.messages.create(
        model=MODEL,
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "SIM_REPLY: Hello from the sim."}],
    )
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL
    [block] = msg.content
    assert block.type == "text" and block.text == "Hello from the sim."
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0


def test_the_streamed_message_equals_the_whole_one(setup: Setup) -> None:
    kwargs = think_and_call(MODEL)
    whole = setup.client.messages.create(**kwargs)
    kinds: list[str] = []
    text: list[str] = []
    with setup.client.messages.stream(**kwargs) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_start") == 3 == kinds.count("content_block_stop")
    assert "message_delta" in kinds
    assert "".join(text) == "Let me look."
    assert comparable(final) == comparable(whole)


def test_thinking_and_a_tool_use(setup: Setup) -> None:
    msg = setup.client.messages.create(**think_and_call(MODEL))
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    thinking, text, call = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants the weather."
    assert text.type == "text" and text.text == "Let me look."
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Oslo"} and call.id.startswith("call_")
    assert msg.stop_reason == "tool_use"


def test_without_thinking_no_thinking_block(setup: Setup) -> None:
    msg = setup.client.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": THINK_AND_CALL}],
        tools=[WEATHER],
    )
    assert [b.type for b in msg.content] == ["text", "tool_use"]


def test_a_tool_result_second_turn(setup: Setup) -> None:
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    first = setup.client.messages.create(**think_and_call(MODEL))
    call = first.content[2]
    assert call.type == "tool_use"
    second = setup.client.messages.create(
        model=MODEL,
        max_tokens=2000,
        tools=[WEATHER],
        thinking=THINKING,
        messages=[
            question,
            {"role": "assistant", "content": first.content},  # as the SDK gave them
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "5C"},
                    {"type": "text", "text": "SIM_REPLY: It is 5C in Oslo."},
                ],
            },
        ],
    )
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].type == "text" and second.content[0].text == "It is 5C in Oslo."
    assert second.stop_reason == "end_turn"
    # the earlier turns (thinking, the call, its result) are in the prompt
    assert second.usage.input_tokens > first.usage.input_tokens


def test_max_tokens_cuts_the_answer(setup: Setup) -> None:
    msg = setup.client.messages.create(
        model=MODEL,
        max_tokens=3,
        messages=[{"role": "user", "content": "SIM_REPLY: one two three four five six"}],
    )
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3


def test_a_stop_sequence(setup: Setup) -> None:
    msg = setup.client.messages.create(
        model=MODEL,
        max_tokens=100,
        stop_sequences=["three"],
        messages=[{"role": "user", "content": "SIM_REPLY: one two three four"}],
    )
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "three"
    assert msg.content[0].type == "text" and msg.content[0].text == "one two "


def test_a_bad_request_is_anthropics_invalid_request_error(setup: Setup) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        setup.client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"frobnicate": True},
        )
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "frobnicate" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        setup.client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert "image" in info.value.message


def test_missing_max_tokens_and_a_raw_error_body(setup: Setup) -> None:
    r = http(
        "POST",
        setup.gw.url + "/v1/messages",
        body={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind"),
    [
        ("POST", "/v1/messages", b"{not json", 400, "invalid_request_error"),
        ("POST", "/v1/messages", b"[1, 2]", 400, "invalid_request_error"),
        ("GET", "/v1/messages", None, 405, "invalid_request_error"),
        ("POST", "/v1/messages/nope", b"{}", 404, "not_found_error"),
        ("POST", "/v1/messages/count_tokens", b'{"model": "x"}', 400, "invalid_request_error"),
    ],
)
def test_every_error_on_the_messages_routes_is_in_anthropics_shape(
    setup: Setup, method: str, path: str, body: bytes | None, status: int, kind: str
) -> None:
    headers = {"Content-Type": "application/json"}
    r = http(method, setup.gw.url + path, body=body, headers=headers)
    assert r.status == status
    said = r.json()
    assert set(said) == {"type", "error", "request_id"} and said["type"] == "error"
    assert said["error"]["type"] == kind and said["error"]["message"]
    assert said["request_id"] == r.headers["X-Request-Id"]


def test_an_unknown_model_is_not_found(setup: Setup) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        setup.client.messages.create(
            model="no-such-model", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    body = info.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "not_found_error"


def test_count_tokens_matches_the_prompt_of_an_answer(setup: Setup) -> None:
    messages: Any = [{"role": "user", "content": "SIM_REPLY: Hello."}]
    counted = setup.client.messages.count_tokens(model=MODEL, system="Be brief.", messages=messages)
    msg = setup.client.messages.create(
        model=MODEL, max_tokens=10, system="Be brief.", messages=messages
    )
    assert counted.input_tokens > 0
    assert counted.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    with_tools = setup.client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=messages, tools=[WEATHER]
    )
    assert with_tools.input_tokens > counted.input_tokens


def test_a_keyed_gateway_takes_the_sdks_x_api_key(module_launch: Launcher, setup: Setup) -> None:
    gw = module_launch.gateway(
        [setup.engine], api_key="sk-test", tokenizer_path=qwen3_tokenizer_dir()
    )
    args: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "SIM_REPLY: Hi."}],
    }
    with anthropic.Anthropic(base_url=gw.url, api_key="sk-test", max_retries=0) as client:
        assert client.messages.create(**args).content[0].type == "text"
    with anthropic.Anthropic(base_url=gw.url, api_key="wrong", max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError) as info:
            client.messages.create(**args)
    body = info.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "authentication_error"
    assert "wrong" not in info.value.message


@pytest.mark.parametrize(
    ("choice", "reply"),
    [
        ({"type": "any"}, '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'),
        ({"type": "tool", "name": "get_weather"}, '{"city": "Oslo"}'),
    ],
)
def test_tool_choice_any_and_a_named_tool(setup: Setup, choice: Any, reply: str) -> None:
    msg = setup.client.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": f"SIM_REPLY: {reply}"}],
        tools=[WEATHER],
        tool_choice=choice,
    )
    [call] = msg.content
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Oslo"} and msg.stop_reason == "tool_use"
