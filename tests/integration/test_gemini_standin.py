"""The Gemini provider core against the Gemini stand-in running as a real process (`smg sim
--provider gemini`), over plain aiohttp: the model listing, whole and streamed answers (text,
thoughts, function calls and their results), and Gemini's errors as OpenAI ones (bad or missing
key, unknown model, rate limit with its retry delay, server errors, a stream cut off)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from smg.pipeline.chat_answer import SseReader
from smg.pipeline.providers.base import Outgoing, ProviderStreamError
from smg.pipeline.providers.gemini import Gemini

from .conftest import Launcher, free_port, http, wait_until

KEY = "AIzaSy-standin-test-key-0123456789abcdef"
MODEL = "gemini-2.0-flash"
TIMEOUT = aiohttp.ClientTimeout(total=15)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def base_url(module_launch: Launcher) -> Iterator[str]:
    port = free_port()
    argv = ["sim", "--provider", "gemini", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--model", MODEL, "--adapters", "gemini-2.5-pro", "--provider-keys", KEY]
    proc = module_launch._start(f"gemini-standin-{port}", argv)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.alive, proc.log_tail()
        return http("GET", url + "/v1beta/models", headers={"x-goog-api-key": KEY}).status == 200

    wait_until(up, 30.0, "the Gemini stand-in to listen")
    yield url


def gemini() -> Gemini:
    counter = itertools.count()
    return Gemini(now=time.time, new_id=lambda: f"t{next(counter)}")


async def send(base: str, out: Outgoing) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.request(out.method, base + out.path, headers=out.headers, data=out.body) as resp,
    ):
        return resp.status, await resp.read()


async def chat(base: str, body: dict[str, Any], key: str | None = KEY) -> tuple[int, Any]:
    provider = gemini()
    status, raw = await send(base, provider.chat_request(body, api_key=key, stream=False))
    status, answer = provider.chat_answer(status, raw)
    return status, orjson.loads(answer)


async def stream(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The OpenAI chunks of a streamed answer, read in whatever pieces the socket gives."""
    provider = gemini()
    out = provider.chat_request(body, api_key=KEY, stream=True)
    translator = provider.chat_stream(body["model"])
    frames = b""
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(base + out.path, headers=out.headers, data=out.body) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        try:
            async for piece in resp.content.iter_any():
                frames += translator.feed(piece)
        except aiohttp.ClientPayloadError:
            pass  # a stream cut off mid-answer: the translator says so at close
    frames += translator.close()
    reader = SseReader()
    chunks = [orjson.loads(p) for p in reader.feed(frames)]
    assert reader.done
    return chunks


def user(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


async def test_the_model_listing_gives_the_served_ids(base_url: str) -> None:
    provider = gemini()
    status, raw = await send(base_url, provider.models_request(KEY))
    assert provider.model_ids(status, raw) == (MODEL, "gemini-2.5-pro")


async def test_a_whole_answer_is_an_openai_completion(base_url: str) -> None:
    status, body = await chat(base_url, {**user("SIM_REPLY: Bonjour tout le monde"), "n": 2})
    assert status == 200
    assert body["object"] == "chat.completion"
    assert [c["message"]["content"] for c in body["choices"]] == ["Bonjour tout le monde"] * 2
    assert {c["finish_reason"] for c in body["choices"]} == {"stop"}
    assert body["usage"]["completion_tokens"] == 8
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 8


async def test_max_tokens_ends_with_length(base_url: str) -> None:
    _, body = await chat(base_url, {**user("SIM_REPLY: one two three four five"), "max_tokens": 2})
    assert body["choices"][0]["message"]["content"] == "one two"
    assert body["choices"][0]["finish_reason"] == "length"


async def test_a_function_call_and_its_result_round_trip(base_url: str) -> None:
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    first = {**user(f"SIM_REPLY: {call}"), "tools": [WEATHER]}
    status, body = await chat(base_url, first)
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (tool_call,) = choice["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "get_weather"
    assert orjson.loads(tool_call["function"]["arguments"]) == {"city": "Paris"}
    assert tool_call["extra_content"]["google"]["thought_signature"]
    # the result goes back as a functionResponse; no SIM_REPLY after it: the default answer
    second = {
        "model": MODEL,
        "tools": [WEATHER],
        "messages": [
            *first["messages"],
            choice["message"],
            {"role": "tool", "tool_call_id": tool_call["id"], "content": '{"temp": 21}'},
        ],
    }
    status, body = await chat(base_url, second)
    assert status == 200, body  # the stand-in checks the signature came back
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == "This is the Gemini stand-in answering."
    # a history whose call lost its signature (a client kept only the OpenAI fields) still works
    del tool_call["extra_content"]
    status, body = await chat(base_url, second)
    assert status == 200, body


async def test_a_stream_gives_role_reasoning_content_finish_and_usage(base_url: str) -> None:
    body = {
        **user("SIM_REPLY: <think>They greet me.</think>Hello there, how are you today?"),
        "reasoning_effort": "low",
    }
    chunks = await stream(base_url, body)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "They greet me."
    assert "".join(d.get("content", "") for d in deltas) == "Hello there, how are you today?"
    assert len([d for d in deltas if d.get("content")]) >= 2  # it did arrive in pieces
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["completion_tokens"] == 6 + 3  # six words of answer, three of thought
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


async def test_a_streamed_function_call_is_a_tool_calls_delta(base_url: str) -> None:
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    chunks = await stream(base_url, {**user(f"SIM_REPLY: {call}"), "tools": [WEATHER]})
    calls = [
        tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert [(tc["function"]["name"], tc["function"]["arguments"]) for tc in calls] == [
        ("get_weather", '{"city":"Rome"}')
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


async def test_a_stream_cut_off_raises_a_stream_error(base_url: str) -> None:
    with pytest.raises(ProviderStreamError) as caught:
        await stream(base_url, user("SIM_REPLY: SIM_BREAK one two three four five six seven"))
    assert caught.value.status == 502


@pytest.mark.parametrize(
    ("prompt", "status", "code"),
    [
        ("SIM_STATUS: 429", 429, "rate_limit_exceeded"),
        ("SIM_STATUS: 500", 500, "server_error"),
        ("SIM_STATUS: 503", 503, "service_unavailable"),
        ("SIM_STATUS: 400", 400, "invalid_request_error"),
    ],
)
async def test_scripted_errors_keep_their_status_with_a_stable_code(
    base_url: str, prompt: str, status: int, code: str
) -> None:
    got, body = await chat(base_url, user(prompt))
    assert got == status
    assert body["error"]["code"] == code
    if status == 429:
        assert body["error"]["message"].endswith("(retry after 7s)")
        assert body["error"]["type"] == "rate_limit_error"


async def test_a_streamed_request_that_fails_is_an_error_answer(base_url: str) -> None:
    provider = gemini()
    out = provider.chat_request(user("SIM_STATUS: 429"), api_key=KEY, stream=True)
    status, raw = await send(base_url, out)
    status, answer = provider.chat_answer(status, raw)
    assert status == 429
    assert orjson.loads(answer)["error"]["code"] == "rate_limit_exceeded"


async def test_a_wrong_or_missing_key_and_an_unknown_model_are_openai_errors(base_url: str) -> None:
    wrong = "AIzaSy-wrong-key-00000000000000000000000"
    status, body = await chat(base_url, user("hi"), key=wrong)
    assert (status, body["error"]["code"]) == (400, "invalid_api_key")
    assert wrong not in orjson.dumps(body).decode()
    status, body = await chat(base_url, user("hi"), key=None)
    assert (status, body["error"]["code"]) == (403, "permission_denied")
    status, body = await chat(base_url, {**user("hi"), "model": "gemini-9"})
    assert (status, body["error"]["code"]) == (404, "model_not_found")
    assert "gemini-9" in body["error"]["message"]


async def test_the_key_may_also_come_as_a_query_parameter(base_url: str) -> None:
    status, raw = await send(base_url, Outgoing("GET", f"/v1beta/models?key={KEY}"))
    assert status == 200
    assert orjson.loads(raw)["models"][0]["name"] == f"models/{MODEL}"


async def test_without_alt_sse_a_stream_is_one_json_array_of_responses(base_url: str) -> None:
    out = gemini().chat_request(user("SIM_REPLY: a b c d e f g"), api_key=KEY, stream=True)
    path = out.path.replace("?alt=sse", "")
    status, raw = await send(base_url, Outgoing("POST", path, out.headers, out.body))
    assert status == 200
    frames = orjson.loads(raw)
    assert len(frames) == 3
    text = "".join(f["candidates"][0]["content"]["parts"][0]["text"] for f in frames)
    assert text == "a b c d e f g"
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_a_streamed_answer_says_what_the_whole_answer_says(base_url: str) -> None:
    body = {
        **user("SIM_REPLY: <think>Short.</think>The quick brown fox jumps over the lazy dog"),
        "reasoning_effort": "high",
        "max_tokens": 6,
    }
    _, whole = await chat(base_url, body)
    chunks = await stream(base_url, body)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    message = whole["choices"][0]["message"]
    assert "".join(d.get("content", "") for d in deltas) == message["content"]
    assert message["content"] == "The quick brown fox jumps over"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == whole["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == whole["usage"]
