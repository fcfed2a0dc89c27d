"""Responses requests: every field checked or refused by name, items mapped to chat messages."""

from __future__ import annotations

from typing import Any

import pytest

from smg.errors import ApiError
from smg.pipeline.responses_request import KNOWN_FIELDS, chat_body, parse_responses
from smg.pipeline.sampling import sampling_from_openai

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def parse(**fields: Any) -> Any:
    return parse_responses({"model": "m", "input": "hi", **fields})


def refused(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_responses(body)
    assert info.value.status in (400, 404)
    return info.value


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    req = parse(instructions="Be brief.")
    assert req.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    )
    assert req.store is True and req.stream is False and req.parallel_tool_calls is True
    assert chat_body(req) == {"model": "m", "messages": list(req.messages)}


def test_items_become_the_chat_turns_a_template_renders() -> None:
    items = [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Oslo?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Need weather."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city": "Bergen"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5C"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "7"}, {"type": "input_text", "text": "C"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Cold."}]},
    ]  # fmt: skip
    req = parse(input=items, tools=[WEATHER])
    call = lambda i, city: {  # noqa: E731
        "id": i,
        "type": "function",
        "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'},
    }
    assert req.messages == (
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("c1", "Oslo"), call("c2", "Bergen")],
            "reasoning_content": "Need weather.",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5C"},
        {"role": "tool", "tool_call_id": "c2", "content": "7C"},
        {"role": "assistant", "content": "Cold."},
    )


def test_tools_choice_limits_and_format_map_to_the_chat_body() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = parse(
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=64,
        temperature=0.5,
        top_p=0.9,
        text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}},
        stream=True,
        metadata={"k": "v"},
    )
    body = chat_body(req)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (64, 0.5, 0.9)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": schema, "strict": True},
    }
    assert body["stream"] is True
    sampling = sampling_from_openai(body, chat=True)  # what the edge checks next
    assert sampling.max_tokens == 64 and sampling.json_schema is not None


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"input": "x"}, "missing_required_parameter", "model"),
        ({"model": "m"}, "missing_required_parameter", "input"),
        ({"model": "m", "input": "x", "frobnicate": 1}, "unknown_parameter", "frobnicate"),
        ({"model": "m", "input": "x", "tools": [{"type": "mcp"}]},
         "invalid_type", "tools[0].server_label"),
        ({"model": "m", "input": "x",
          "tools": [{"type": "mcp", "server_label": "s", "server_url": "file:///etc/passwd"}]},
         "invalid_value", "tools[0].server_url"),
        ({"model": "m", "input": "x", "tools": [{"type": "mcp", "server_label": "s", "x": 1}]},
         "invalid_value", "tools[0].x"),
        ({"model": "m", "input": "x", "tools": [{"type": "mcp", "server_label": "s"},
                                                 {"type": "mcp", "server_label": "s"}]},
         "invalid_value", "tools[1]"),
        ({"model": "m", "input": "x",
          "tools": [{"type": "mcp", "server_label": "s", "require_approval": "sometimes"}]},
         "invalid_value", "tools[0].require_approval"),
        ({"model": "m", "input": "x",
          "tools": [{"type": "mcp", "server_label": "s", "headers": {"A": "b"}}]},
         "invalid_value", "tools[0].headers"),
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]},
         "unsupported_parameter", "tools[0]"),
        ({"model": "m", "input": "x", "background": True, "store": False},
         "invalid_value", "background"),
        ({"model": "m", "input": "x", "background": "yes"}, "invalid_type", "background"),
        ({"model": "m", "input": "x", "previous_response_id": 3},
         "invalid_type", "previous_response_id"),
        ({"model": "m", "input": "x", "conversation": "conv_1", "previous_response_id": "r"},
         "mutually_exclusive_parameters", "conversation"),
        ({"model": "m", "input": "x", "conversation": {"name": "c"}},
         "invalid_type", "conversation"),
        ({"model": "m", "input": "x", "truncation": "auto"}, "unsupported_parameter", "truncation"),
        ({"model": "m", "input": "x", "top_logprobs": 3}, "unsupported_parameter", "top_logprobs"),
        ({"model": "m", "input": []}, "empty_array", "input"),
        ({"model": "m", "input": 3}, "invalid_type", "input"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]},
         "invalid_value", "input[0].role"),
        ({"model": "m", "input": [{"role": "user",
          "content": [{"type": "input_image", "image_url": "u"}]}]},
         "unsupported_parameter", "input[0].content[0]"),
        ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "invalid_type", "input[0].call_id"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
         "unsupported_parameter", "input[0]"),
        ({"model": "m", "input": [{"type": "bogus"}]}, "invalid_value", "input[0].type"),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "invalid_value", "tool_choice"),
        ({"model": "m", "input": "x", "tools": [WEATHER],
          "tool_choice": {"type": "function", "name": "other"}}, "invalid_value", "tool_choice"),
        ({"model": "m", "input": "x", "max_output_tokens": 0},
         "invalid_value", "max_output_tokens"),
        ({"model": "m", "input": "x", "stream": "yes"}, "invalid_type", "stream"),
        ({"model": "m", "input": "x", "metadata": {"k": 1}}, "invalid_value", "metadata"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}},
         "invalid_value", "text.format"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "huge"}},
         "invalid_value", "reasoning.effort"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "invalid_type", "temperature"),
    ],
)  # fmt: skip
def test_bad_or_unsupported_fields_get_a_400_naming_them(
    body: dict[str, Any], code: str, param: str
) -> None:
    err = refused(body)
    assert (err.status, err.code, err.param) == (400, code, param)
    assert err.body()["error"]["type"] == "invalid_request_error"


def test_every_field_of_the_sdk_create_params_is_known() -> None:
    from openai.types.responses import response_create_params

    sdk = set(response_create_params.ResponseCreateParamsBase.__annotations__)
    # fields newer SDKs added after smg's table are refused by name, never dropped
    assert KNOWN_FIELDS <= sdk | {"stream"}  # stream: on the (Non)Streaming subclasses


def test_a_conversation_is_named_by_its_id_or_an_object() -> None:
    assert parse(conversation="conv_1").conversation == "conv_1"
    assert parse(conversation={"id": "conv_2"}).conversation == "conv_2"
    assert parse().conversation is None


def test_out_of_range_sampling_is_refused_by_the_sampling_stage() -> None:
    req = parse(temperature=3.0)
    with pytest.raises(ApiError) as info:
        sampling_from_openai(chat_body(req), chat=True)
    assert info.value.status == 400 and info.value.param == "temperature"
