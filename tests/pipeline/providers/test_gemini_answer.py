"""Gemini's whole answers and errors as OpenAI chat completions and error bodies: text, thought
parts, function calls, finish reasons, usage, blocked prompts, every error status; the model
listing. What comes out is what the gateway's own reader (`whole_step`) takes."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from smg.pipeline.chat_answer import whole_step
from smg.pipeline.providers.gemini import Gemini

KEY = "AIzaSyTEST-secret-key-0123456789abcdefghi"


def provider() -> Gemini:
    counter = itertools.count()
    return Gemini(now=lambda: 1700000000.5, new_id=lambda: f"id{next(counter)}")


def answer(data: dict[str, Any], status: int = 200) -> tuple[int, dict[str, Any]]:
    code, body = provider().chat_answer(status, orjson.dumps(data))
    return code, orjson.loads(body)


# recorded shape of a gemini-2.5-flash answer with thinking on (includeThoughts)
THOUGHTFUL = {
    "candidates": [
        {
            "content": {
                "parts": [
                    {"text": "The user greets me. ", "thought": True},
                    {"text": "Answer warmly.", "thought": True},
                    {"text": "Hello! "},
                    {"text": "How can I help?"},
                ],
                "role": "model",
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 5,
        "candidatesTokenCount": 7,
        "totalTokenCount": 40,
        "thoughtsTokenCount": 28,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5}],
    },
    "modelVersion": "gemini-2.5-flash",
    "responseId": "mVxsaN3qLtrk",
}


def test_text_and_thought_parts_become_content_and_reasoning_with_usage() -> None:
    status, body = answer(THOUGHTFUL)
    assert status == 200
    assert body == {
        "id": "chatcmpl-id0",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gemini-2.5-flash",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello! How can I help?",
                    "reasoning_content": "The user greets me. Answer warmly.",
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 35,
            "total_tokens": 40,
            "completion_tokens_details": {"reasoning_tokens": 28},
        },
    }
    step = whole_step(body)
    assert step.delta.normal_text == "Hello! How can I help?"
    assert step.delta.reasoning_text == "The user greets me. Answer warmly."


def test_function_calls_become_tool_calls_with_made_ids_and_json_arguments() -> None:
    data = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {
                            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                            "thoughtSignature": "CiQBjz1rX2sig",
                        },
                        {"functionCall": {"name": "get_time", "args": {"tz": "CET"}}},
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 30,
            "candidatesTokenCount": 12,
            "totalTokenCount": 42,
        },
        "modelVersion": "gemini-2.0-flash",
    }
    _, body = answer(data)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_id0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                "extra_content": {"google": {"thought_signature": "CiQBjz1rX2sig"}},
            },
            {
                "id": "call_id1",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"CET"}'},
            },
        ],
    }
    assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    calls = whole_step(body).delta.calls
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "CET"}),
    ]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("SPII", "content_filter"),
        ("OTHER", "stop"),
    ],
)
def test_finish_reasons_map_to_openai_ones(reason: str, finish: str) -> None:
    data = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}
    assert answer(data)[1]["choices"][0]["finish_reason"] == finish


def test_several_candidates_are_several_choices() -> None:
    data = {
        "candidates": [
            {"content": {"parts": [{"text": "a"}]}, "finishReason": "STOP", "index": 0},
            {"content": {"parts": [{"text": "b"}]}, "finishReason": "MAX_TOKENS", "index": 1},
        ]
    }
    choices = answer(data)[1]["choices"]
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in choices] == [
        (0, "a", "stop"),
        (1, "b", "length"),
    ]


def test_a_blocked_prompt_is_an_empty_content_filter_choice() -> None:
    data = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
        "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8},
    }
    status, body = answer(data)
    assert status == 200
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None},
            "finish_reason": "content_filter",
            "logprobs": None,
        }
    ]
    assert body["usage"] == {"prompt_tokens": 8, "completion_tokens": 0, "total_tokens": 8}


def test_a_success_status_without_a_json_object_is_a_502() -> None:
    status, body = provider().chat_answer(200, b"<html>proxy</html>")
    assert status == 502
    assert body and orjson.loads(body)["error"]["code"] == "upstream_error"


def err(code: int, status: str, message: str, details: list | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return {"error": error}


RETRY = [
    {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"quotaMetric": "generate_content_free_tier_requests"}],
    },
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22s"},
]
BAD_KEY = [
    {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
    }
]


@pytest.mark.parametrize(
    ("status", "data", "code", "kind"),
    [
        (429, err(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", RETRY), "rate_limit_exceeded",
         "rate_limit_error"),
        (400, err(400, "INVALID_ARGUMENT", "Bad field."), "invalid_request_error",
         "invalid_request_error"),
        (400, err(400, "INVALID_ARGUMENT", "API key not valid.", BAD_KEY), "invalid_api_key",
         "invalid_request_error"),
        (401, err(401, "UNAUTHENTICATED", "No credential."), "invalid_api_key",
         "invalid_request_error"),
        (403, err(403, "PERMISSION_DENIED", "Denied."), "permission_denied", "permission_error"),
        (404, err(404, "NOT_FOUND", "models/x is not found."), "model_not_found",
         "invalid_request_error"),
        (500, err(500, "INTERNAL", "An internal error."), "server_error", "server_error"),
        (503, err(503, "UNAVAILABLE", "The model is overloaded."), "service_unavailable",
         "server_error"),
        (504, err(504, "DEADLINE_EXCEEDED", "Deadline."), "timeout", "server_error"),
    ],
)  # fmt: skip
def test_every_error_keeps_its_status_and_gets_a_stable_code(
    status: int, data: dict[str, Any], code: str, kind: str
) -> None:
    got, body = answer(data, status)
    assert got == status
    assert body["error"]["code"] == code
    assert body["error"]["type"] == kind
    assert body["error"]["message"].startswith(data["error"]["message"])


def test_a_rate_limit_message_carries_the_retry_delay() -> None:
    _, body = answer(err(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", RETRY), 429)
    assert body["error"]["message"] == "Quota exceeded. (retry after 22s)"


def test_an_error_that_is_not_json_keeps_its_status() -> None:
    status, body = provider().chat_answer(502, b"<html>Bad Gateway</html>")
    assert status == 502
    assert orjson.loads(body)["error"] == {
        "message": "Gemini answered HTTP 502",
        "type": "server_error",
        "param": None,
        "code": "upstream_error",
    }


def test_a_key_in_an_error_message_is_masked() -> None:
    message = f"API key {KEY} not valid for https://x/v1beta/models?key=sk-other-secret&a=1"
    _, body = answer(err(400, "INVALID_ARGUMENT", message, BAD_KEY), 400)
    text = body["error"]["message"]
    assert KEY not in text and "sk-other-secret" not in text
    assert "?key=***&a=1" in text


def test_model_ids_drop_the_models_prefix() -> None:
    listing = {
        "models": [
            {
                "name": "models/gemini-2.0-flash",
                "displayName": "Gemini 2.0 Flash",
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            },
            {"name": "models/gemini-2.5-pro", "supportedGenerationMethods": ["generateContent"]},
        ],
        "nextPageToken": "",
    }
    gemini = provider()
    assert gemini.model_ids(200, orjson.dumps(listing)) == ("gemini-2.0-flash", "gemini-2.5-pro")
    assert gemini.model_ids(403, orjson.dumps(err(403, "PERMISSION_DENIED", "no"))) == ()
    assert gemini.model_ids(200, b"not json") == ()
    assert gemini.model_ids(200, b'{"models": "x"}') == ()
