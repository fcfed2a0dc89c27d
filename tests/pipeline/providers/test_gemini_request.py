"""An OpenAI chat request as Gemini's wire request: path, key header, contents, system,
generation config, tools and tool results, response formats; what has no Gemini form is a
ProviderRequestError naming the parameter."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from smg.pipeline.providers.base import ProviderRequestError
from smg.pipeline.providers.gemini import Gemini
from smg.pipeline.providers.gemini_request import gemini_body

KEY = "AIzaSyTEST-secret-key-0123456789abcdefghi"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": ["string", "null"], "enum": ["c", "f"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def provider() -> Gemini:
    return Gemini(now=lambda: 1700000000.0, new_id=lambda: "abc")


def test_a_chat_request_is_a_generate_content_post_with_the_key_in_a_header() -> None:
    body = {"model": "gemini-2.0-flash", "messages": [{"role": "user", "content": "Hi"}]}
    out = provider().chat_request(body, api_key=KEY, stream=False)
    assert out.method == "POST"
    assert out.path == "/v1beta/models/gemini-2.0-flash:generateContent"
    assert out.headers["x-goog-api-key"] == KEY
    assert KEY not in out.path and KEY.encode() not in out.body
    assert orjson.loads(out.body) == {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}


def test_a_streamed_request_asks_for_sse_and_a_models_prefix_is_not_doubled() -> None:
    body = {"model": "models/gemini-2.5-pro", "messages": [{"role": "user", "content": "Hi"}]}
    out = provider().chat_request(body, api_key=None, stream=True)
    assert out.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert "x-goog-api-key" not in out.headers


def test_the_model_listing_request_carries_the_key() -> None:
    out = provider().models_request(KEY)
    assert (out.method, out.path.split("?")[0]) == ("GET", "/v1beta/models")
    assert out.headers["x-goog-api-key"] == KEY


def test_system_user_and_assistant_turns_and_sampling_map_to_gemini_fields() -> None:
    body = {
        "model": "g",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": "Weather?"},
            {"role": "user", "content": "In Paris."},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "max_tokens": 100,
        "stop": "END",
        "n": 2,
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "stream_options": {"include_usage": True},
        "user": "u1",
    }
    assert gemini_body(body) == {
        "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Use French."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Hello"}]},
            {"role": "model", "parts": [{"text": "Bonjour"}]},
            {"role": "user", "parts": [{"text": "Weather?"}, {"text": "In Paris."}]},
        ],
        "generationConfig": {
            "temperature": 0.2,
            "topP": 0.9,
            "topK": 40,
            "maxOutputTokens": 100,
            "stopSequences": ["END"],
            "candidateCount": 2,
            "seed": 7,
            "presencePenalty": 0.5,
            "frequencyPenalty": 0.25,
        },
    }


def test_max_completion_tokens_wins_and_a_stop_list_is_kept() -> None:
    body = {
        "model": "g",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 5,
        "max_completion_tokens": 9,
        "stop": ["a", "b"],
    }
    config = gemini_body(body)["generationConfig"]
    assert config == {"maxOutputTokens": 9, "stopSequences": ["a", "b"]}


def test_tools_tool_calls_and_tool_results_round_trip_as_function_parts() -> None:
    body = {
        "model": "g",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        "extra_content": {"google": {"thought_signature": "CiQBjz1rX2sig"}},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": ""},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
        ],
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
    }
    out = gemini_body(body)
    assert out["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                    "thoughtSignature": "CiQBjz1rX2sig",
                },
                {"functionCall": {"name": "get_time", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"temp": 21}}},
                {"functionResponse": {"name": "get_time", "response": {"result": "noon"}}},
            ],
        },
    ]
    assert out["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {
                            "city": {"type": "STRING"},
                            "unit": {"type": "STRING", "nullable": True, "enum": ["c", "f"]},
                        },
                        "required": ["city"],
                    },
                }
            ]
        }
    ]
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


def test_a_first_call_without_its_signature_gets_the_documented_skip_value() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "model": "g",
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [call, {**call, "id": "c2"}]},
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        ],
    }
    parts = gemini_body(body)["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == ["skip_thought_signature_validator", None]


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tool_choice_maps_to_a_function_calling_mode(choice: Any, config: dict) -> None:
    body = {
        "model": "g",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": choice,
    }
    assert gemini_body(body)["toolConfig"] == {"functionCallingConfig": config}


def test_response_formats_and_reasoning_effort_map_to_generation_config() -> None:
    base = {"model": "g", "messages": [{"role": "user", "content": "x"}]}
    as_json = gemini_body({**base, "response_format": {"type": "json_object"}})
    assert as_json["generationConfig"] == {"responseMimeType": "application/json"}
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "city",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                "required": ["names"],
                "additionalProperties": False,
            },
        },
    }
    assert gemini_body({**base, "response_format": schema})["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "OBJECT",
            "properties": {"names": {"type": "ARRAY", "items": {"type": "STRING"}}},
            "required": ["names"],
        },
    }
    thinking = gemini_body({**base, "reasoning_effort": "low"})["generationConfig"]
    assert thinking == {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}


def test_the_messages_surfaces_thinking_switch_asks_for_thoughts() -> None:
    base = {"model": "g", "messages": [{"role": "user", "content": "x"}], "max_tokens": 64}
    on = gemini_body({**base, "chat_template_kwargs": {"enable_thinking": True}})
    assert on["generationConfig"] == {
        "maxOutputTokens": 64,
        "thinkingConfig": {"includeThoughts": True},
    }
    off = gemini_body({**base, "chat_template_kwargs": {"enable_thinking": False}})
    assert off["generationConfig"] == {"maxOutputTokens": 64}


def test_a_data_url_image_becomes_inline_data() -> None:
    body = {
        "model": "g",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is it?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                ],
            }
        ],
    }
    assert gemini_body(body)["contents"][0]["parts"] == [
        {"text": "What is it?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
    ]


USER = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"min_p": 0.1}, "min_p"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"temperature": "hot"}, "temperature"),
        ({"n": 1.5}, "n"),
        ({"stop": ["a", "b", "c", "d", "e", "f"]}, "stop"),
        ({"stop": [1]}, "stop"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": "x"}, "tools"),
        ({"reasoning_effort": "max"}, "reasoning_effort"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"anyOf": "string"}},
                }
            },
            "response_format.json_schema.schema.anyOf",
        ),
        ({"chat_template_kwargs": "on"}, "chat_template_kwargs"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "object", "$ref": "#/defs/a"}},
                }
            },
            "response_format.json_schema.schema.$ref",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": ["string", "integer"]}},
                }
            },
            "response_format.json_schema.schema.type",
        ),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "only"}]}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": ["hi"]}, "messages[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url",
        ),
        (
            {"messages": [*USER, {"role": "tool", "tool_call_id": "call_9", "content": "1"}]},
            "messages[1].tool_call_id",
        ),
        (
            {
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
    ],
)
def test_what_gemini_cannot_express_is_refused_naming_the_parameter(
    extra: dict[str, Any], param: str
) -> None:
    body = {"model": "g", "messages": USER, **extra}
    with pytest.raises(ProviderRequestError) as caught:
        provider().chat_request(body, api_key=KEY, stream=False)
    assert caught.value.param == param
    assert KEY not in caught.value.message


def test_a_missing_model_is_refused() -> None:
    with pytest.raises(ProviderRequestError) as caught:
        provider().chat_request({"messages": USER}, api_key=None, stream=False)
    assert caught.value.param == "model"
