"""The provider shell's pure parts: which key, which request, and the translated readers."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from smg.errors import ApiError
from smg.pipeline.backends.provider_http import (
    TranslatedStream,
    WholeContent,
    bearer_key,
    outgoing_request,
)
from smg.pipeline.providers import provider
from smg.pipeline.providers.base import ProviderStreamError

CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})


def test_bearer_key() -> None:
    assert bearer_key({"Authorization": "Bearer sk-1"}) == "sk-1"
    assert bearer_key({"Authorization": "bearer  sk-2 "}) == "sk-2"
    assert bearer_key({"Authorization": "sk-3"}) == "sk-3"
    assert bearer_key({}) is None


def test_outgoing_request_for_chat_and_the_400s() -> None:
    out, stream, usage = outgoing_request(
        provider("anthropic", time.time), "/v1/chat/completions", CHAT, "k"
    )
    assert stream and out.path == "/v1/messages" and out.headers["x-api-key"] == "k"
    assert not usage
    asked = orjson.loads(CHAT) | {"stream_options": {"include_usage": True}}
    _, _, usage = outgoing_request(
        provider("openai", time.time), "/v1/chat/completions", orjson.dumps(asked), "k"
    )
    assert usage
    with pytest.raises(ApiError) as info:
        outgoing_request(provider("openai", time.time), "/generate", CHAT, "k")
    assert (info.value.status, info.value.code) == (400, "unsupported_endpoint")
    with pytest.raises(ApiError) as info:
        outgoing_request(provider("openai", time.time), "/v1/chat/completions", b"[1]", "k")
    assert info.value.status == 400
    body = orjson.dumps({"model": "m", "messages": [], "logprobs": True})
    with pytest.raises(ApiError) as info:
        outgoing_request(provider("anthropic", time.time), "/v1/chat/completions", body, "k")
    assert (info.value.code, info.value.param) == ("unsupported_parameter", "logprobs")


class Chunks:
    """What the translated reader needs of aiohttp's StreamReader."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.exc: BaseException | None = None

    async def readany(self) -> bytes:
        if self.exc is not None:
            raise self.exc
        return self.chunks.pop(0) if self.chunks else b""

    def exception(self) -> BaseException | None:
        return self.exc

    def set_exception(self, exc: BaseException) -> None:
        self.exc = exc


async def _drain(reader: TranslatedStream | WholeContent) -> bytes:
    out = b""
    while chunk := await reader.readany():
        out += chunk
    return out


def test_translated_stream_reads_to_done_and_raises_on_a_cut() -> None:
    events = (
        b'data: {"type":"message_start","message":{"id":"x","usage":{}}}\n\n',
        b'data: {"type":"message_stop"}\n\n',
    )
    reader = TranslatedStream(Chunks(*events), provider("anthropic", time.time).chat_stream("m"))  # type: ignore[arg-type]
    assert asyncio.run(_drain(reader)).endswith(b"data: [DONE]\n\n")
    cut = TranslatedStream(Chunks(events[0]), provider("anthropic", time.time).chat_stream("m"))  # type: ignore[arg-type]
    with pytest.raises(ProviderStreamError):
        asyncio.run(_drain(cut))


def test_the_idle_cut_reaches_the_upstream_reader() -> None:
    inner = Chunks(b"x")
    reader = TranslatedStream(inner, provider("openai", time.time).chat_stream("m"))  # type: ignore[arg-type]
    reader.set_exception(TimeoutError("idle"))
    assert inner.exception() is reader.exception()
    whole = WholeContent(b"body")
    assert asyncio.run(_drain(whole)) == b"body"
    whole.set_exception(TimeoutError("idle"))
    with pytest.raises(TimeoutError):
        asyncio.run(whole.readany())
