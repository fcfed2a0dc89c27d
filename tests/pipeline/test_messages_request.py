"""The Messages request parser: Anthropic's body checked field by field (400 naming the field,
never a silent drop) and mapped to the chat body the flow runs."""

from __future__ import annotations

from typing import Any

import pytest
from support.messages_cases import WEATHER

from smg.errors import ApiError, anthropic_body
from smg.pipeline.messages_request import chat_body, parse_messages


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def refused(raw: dict[str, Any], param: str, *, count: bool = False) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_messages(raw, count=count)
    assert info.value.status == 400 and info.value.param == param, info.value
    return info.value


def test_a_conversation_maps_to_chat_messages_in_order() -> None:
    req = parse_messages(
        body(
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            tools=[WEATHER],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Look it up.", "signature": ""},
                        {"type": "text", "text": "Let me look."},
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"city": "Oslo"},
                            "caller": None,  # an SDK's block echoed back
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_1",
                            "content": [{"type": "text", "text": "5C"}],
                        },
                        {"type": "text", "text": "Thanks.", "cache_control": {"type": "ephemeral"}},
                    ],
                },
            ],
        )
    )
    assert list(req.messages) == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5C"},
        {"role": "user", "content": "Thanks."},
    ]


def test_the_chat_body_carries_sampling_tools_and_thinking() -> None:
    req = parse_messages(
        body(
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            stop_sequences=["END"],
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            thinking={"type": "enabled", "budget_tokens": 1024},
            max_tokens=2000,
            metadata={"user_id": "u1"},
            stream=True,
        )
    )
    chat = chat_body(req)
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"] and chat["max_tokens"] == 2000
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (0.5, 0.9, 40)
    assert chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert chat["user"] == "u1" and chat["stream"] is True
    assert chat_body(parse_messages(body()))["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(
    ("kind", "expected"), [("auto", "auto"), ("any", "required"), ("none", "none")]
)
def test_tool_choice_kinds(kind: str, expected: str) -> None:
    req = parse_messages(body(tools=[WEATHER], tool_choice={"type": kind}))
    assert chat_body(req)["tool_choice"] == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"frobnicate": 1}, "frobnicate"),
        ({"service_tier": "auto"}, "service_tier"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"stop_sequences": [""]}, "stop_sequences"),
        ({"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
        ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0"),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
        ({"tools": [{**WEATHER, "extra": 1}]}, "tools.0.extra"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "x"}}, "tool_choice.name"),
        ({"metadata": {"team": "a"}}, "metadata.team"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x", "name": "n"}]}, "messages.0.name"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages.0.content.0",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "y": 1}]}]},
            "messages.0.content.0.y",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a"}]}]},
            "messages.0.content.0",
        ),
        ({"system": [{"type": "image"}]}, "system.0"),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "The answer is"},
                ]
            },
            "messages.1",
        ),
    ],
)
def test_bad_fields_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    refused(body(**fields), param)


def test_missing_fields() -> None:
    refused({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens")
    refused({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model")
    refused({"model": "m", "max_tokens": 5}, "messages")


def test_count_tokens_takes_only_what_shapes_the_prompt() -> None:
    req = parse_messages(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "system": "s"}, count=True
    )
    assert req.messages[0] == {"role": "system", "content": "s"}
    refused(body(), "max_tokens", count=True)


def test_errors_in_anthropics_shape() -> None:
    err = refused(body(frobnicate=1), "frobnicate")
    assert anthropic_body(err, "req-1") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": err.message},
        "request_id": "req-1",
    }
    for status, kind in [(404, "not_found_error"), (503, "overloaded_error"), (502, "api_error")]:
        assert anthropic_body(ApiError(status, "c", "m"))["error"]["type"] == kind
