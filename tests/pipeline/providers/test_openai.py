"""The OpenAI pass-through core: the request as it came, the answer nearly as it is."""

from __future__ import annotations

import time

import orjson

from smg.pipeline.providers import provider

OPENAI = provider("openai", time.time)


def test_request_passes_the_body_with_a_bearer_key() -> None:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "seed": 3}
    out = OPENAI.chat_request(body, api_key="sk-1", stream=False)
    assert (out.method, out.path) == ("POST", "/v1/chat/completions")
    assert out.headers["Authorization"] == "Bearer sk-1"
    assert orjson.loads(out.body) == body
    assert "Authorization" not in OPENAI.chat_request(body, api_key=None, stream=False).headers


def test_answers_and_openai_errors_are_relayed_as_they_are() -> None:
    ok = b'{"id":"c","object":"chat.completion","choices":[]}'
    assert OPENAI.chat_answer(200, ok) == (200, ok)
    err = b'{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}'
    assert OPENAI.chat_answer(429, err) == (429, err)


def test_an_error_not_in_openai_shape_gets_it_with_the_status_kept() -> None:
    status, body = OPENAI.chat_answer(503, b"<html>busy</html>")
    assert status == 503 and orjson.loads(body)["error"]["code"] == "upstream_error"
    status, body = OPENAI.chat_answer(429, b"")
    assert status == 429 and orjson.loads(body)["error"]["code"] == "rate_limit_exceeded"


def test_stream_bytes_pass_untouched_and_models_are_listed() -> None:
    tr = OPENAI.chat_stream("gpt-x")
    assert tr.feed(b"data: {}\n\n") == b"data: {}\n\n" and tr.close() == b""
    out = OPENAI.models_request("sk-1")
    assert (out.method, out.path, out.headers) == (
        "GET", "/v1/models", {"Authorization": "Bearer sk-1"},
    )  # fmt: skip
    listing = b'{"object":"list","data":[{"id":"a"},{"id":"b"},{"id":"a"},{"x":1}]}'
    assert OPENAI.model_ids(200, listing) == ("a", "b")
    assert OPENAI.model_ids(401, listing) == ()
