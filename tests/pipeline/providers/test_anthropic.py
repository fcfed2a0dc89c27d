"""The Anthropic translation cores on wire data shaped as Anthropic documents it."""

from __future__ import annotations

import json
import time

import orjson
import pytest

from smg.pipeline.providers import UnknownProvider, provider
from smg.pipeline.providers.anthropic_request import DEFAULT_MAX_TOKENS, messages_body
from smg.pipeline.providers.base import ProviderRequestError, ProviderStreamError

ANTHROPIC = provider("anthropic", now=lambda: 1700000000.0)


def test_registry_knows_openai_and_anthropic_and_names_the_unknown() -> None:
    assert provider("openai", time.time).name == "openai"
    assert provider("anthropic", time.time).name == "anthropic"
    with pytest.raises(UnknownProvider, match=r"unknown provider 'cohere'.*openai, anthropic"):
        provider("cohere", time.time)


def test_request_carries_system_tools_choice_stop_and_the_vendor_headers() -> None:
    body = {
        "model": "claude-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "No lists."}]},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "stop": "END",
        "max_completion_tokens": 99,
        "temperature": 0.2,
        "n": 1,
    }
    out = ANTHROPIC.chat_request(body, api_key="sk-ant-1", stream=True)
    assert (out.method, out.path) == ("POST", "/v1/messages")
    assert out.headers["x-api-key"] == "sk-ant-1"
    assert out.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in out.headers
    sent = orjson.loads(out.body)
    assert sent["system"] == "Be brief.\n\nNo lists."
    assert sent["max_tokens"] == 99 and sent["temperature"] == 0.2 and sent["stream"] is True
    assert sent["stop_sequences"] == ["END"]
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert sent["tools"] == [
        {
            "name": "weather",
            "description": "Weather of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    ]
    # the tool result and the next user words are one user turn
    assert sent["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "text", "text": "And tomorrow?"},
    ]


def test_max_tokens_defaults_and_named_tool_choice() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert messages_body(body, stream=False)["max_tokens"] == DEFAULT_MAX_TOKENS
    body["max_tokens"] = 7
    body["tool_choice"] = {"type": "function", "function": {"name": "f"}}
    sent = messages_body(body, stream=False)
    assert sent["max_tokens"] == 7 and "stream" not in sent
    assert sent["tool_choice"] == {"type": "tool", "name": "f"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("logprobs", True),
        ("presence_penalty", 0.5),
        ("seed", 3),
        ("response_format", {"type": "json_object"}),
    ],
)
def test_what_messages_cannot_say_is_a_named_400(field: str, value: object) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(ProviderRequestError) as info:
        ANTHROPIC.chat_request(body, api_key="k", stream=False)
    assert info.value.param == field


def test_whole_answer_with_text_and_tool_use() -> None:
    answer = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "look it up", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_9", "name": "weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 11, "cache_read_input_tokens": 5},
    }
    status, body = ANTHROPIC.chat_answer(200, orjson.dumps(answer))
    out = orjson.loads(body)
    assert status == 200 and out["object"] == "chat.completion" and out["created"] == 1700000000
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check."
    assert choice["message"]["reasoning_content"] == "look it up"
    call = choice["message"]["tool_calls"][0]
    assert call["id"] == "toolu_9" and call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert out["usage"] == {"prompt_tokens": 25, "completion_tokens": 11, "total_tokens": 36}


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
    ],
)
def test_stop_reasons_map(stop: str, finish: str) -> None:
    answer = {"type": "message", "id": "m", "content": [{"type": "text", "text": "x"}],
              "stop_reason": stop, "usage": {}}  # fmt: skip
    _, body = ANTHROPIC.chat_answer(200, orjson.dumps(answer))
    assert orjson.loads(body)["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (429, "rate_limit_error", "rate_limit_exceeded"),
        (529, "overloaded_error", "overloaded"),
        (401, "authentication_error", "invalid_api_key"),
        (500, "api_error", "upstream_error"),
        (400, "invalid_request_error", "invalid_request_error"),
    ],
)
def test_errors_keep_the_status_in_openai_shape(status: int, kind: str, code: str) -> None:
    raw = orjson.dumps({"type": "error", "error": {"type": kind, "message": "it said no"}})
    got, body = ANTHROPIC.chat_answer(status, raw)
    err = orjson.loads(body)["error"]
    assert got == status and err["code"] == code and err["message"] == "it said no"


def test_a_success_that_is_no_message_is_502() -> None:
    status, body = ANTHROPIC.chat_answer(200, b"<html>")
    assert status == 502 and orjson.loads(body)["error"]["code"] == "upstream_bad_answer"


def _events(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\r\ndata: {json.dumps(e)}\r\n\r\n".encode() for e in events)


STREAM = _events(
    {"type": "message_start", "message": {"id": "msg_5", "type": "message", "role": "assistant",
     "model": "claude-x", "content": [], "usage": {"input_tokens": 12, "output_tokens": 1}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Héllo"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " you"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
     "id": "toolu_3", "name": "weather", "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
     "partial_json": '{"city": '}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
     "partial_json": '"Rome"}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 15}},
    {"type": "message_stop"},
)  # fmt: skip


def _run(data: bytes, cuts: list[int]) -> bytes:
    tr = ANTHROPIC.chat_stream("claude-x")
    out, last = b"", 0
    for cut in [*cuts, len(data)]:
        out += tr.feed(data[last:cut])
        last = cut
    return out + tr.close()


def _chunks(sse: bytes) -> list[dict]:
    frames = [f for f in sse.split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    return [orjson.loads(f[6:]) for f in frames[:-1]]


def test_stream_translates_text_tool_call_finish_and_usage() -> None:
    chunks = _chunks(_run(STREAM, []))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "msg_5" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Héllo you"
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if "tool_calls" in c["choices"][0]["delta"]]  # fmt: skip
    assert calls[0]["id"] == "toolu_3" and calls[0]["function"]["name"] == "weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Rome"}'
    assert {c["index"] for c in calls} == {0}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"] == {"prompt_tokens": 12, "completion_tokens": 15,
                                   "total_tokens": 27}  # fmt: skip


def test_stream_is_the_same_split_at_every_byte() -> None:
    whole = _chunks(_run(STREAM, []))
    for cut in range(1, len(STREAM)):
        assert _chunks(_run(STREAM, [cut])) == whole
    assert _chunks(_run(STREAM, list(range(1, len(STREAM))))) == whole


def test_an_error_event_raises_with_the_vendor_status() -> None:
    data = _events(
        {"type": "message_start", "message": {"id": "m", "usage": {}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    tr = ANTHROPIC.chat_stream("claude-x")
    before = _chunks(tr.feed(data) + b"data: [DONE]\n\n")  # what came first is still shown
    assert before[0]["choices"][0]["delta"]["role"] == "assistant"
    with pytest.raises(ProviderStreamError) as info:
        tr.close()
    assert (info.value.status, info.value.code, info.value.message) == (
        529, "overloaded", "Overloaded",
    )  # fmt: skip


def test_a_stream_cut_before_message_stop_raises_at_close() -> None:
    tr = ANTHROPIC.chat_stream("claude-x")
    tr.feed(STREAM[: STREAM.index(b"event: message_delta")])
    with pytest.raises(ProviderStreamError, match="before message_stop"):
        tr.close()


def test_images_become_image_blocks_and_a_bad_part_is_named() -> None:
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}], "store": False}
    [turn] = messages_body(body, stream=False)["messages"]
    assert turn["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0K"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]  # fmt: skip
    body["messages"] = [{"role": "user", "content": [{"type": "input_audio"}]}]
    with pytest.raises(ProviderRequestError) as info:
        messages_body(body, stream=False)
    assert info.value.param == "messages[0]"
