"""A provider's stream in OpenAI's usage terms (`UsageShaped`): counts only when asked, then in
their own `choices: []` chunk; whatever the inner translator does and however its bytes are
split. Real translators (Anthropic's, Gemini's, the pass-through) on recorded-shape input."""

from __future__ import annotations

import random
import time
from typing import Any

import orjson
import pytest

from smg.pipeline.providers import provider
from smg.pipeline.providers.openai import PassThroughStream
from smg.pipeline.providers.stream_usage import UsageShaped

USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}


def sse(*chunks: Any, done: bool = True, sep: bytes = b"\n\n") -> bytes:
    out = b"".join(b"data: " + orjson.dumps(c) + sep for c in chunks)
    return out + (b"data: [DONE]" + sep if done else b"")


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice], **extra}


def frames(data: bytes) -> list[Any]:
    text = data.replace(b"\r\n", b"\n")
    out = []
    for frame in text.split(b"\n\n"):
        if frame.startswith(b"data: "):
            payload = frame[6:]
            out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


def run(shaped: UsageShaped, data: bytes, pieces: str) -> bytes:
    """Feed `data` whole, a byte at a time, or in random pieces; then close."""
    if pieces == "whole":
        cuts = [data]
    elif pieces == "bytes":
        cuts = [data[i : i + 1] for i in range(len(data))]
    else:
        rng, cuts, i = random.Random(7), [], 0
        while i < len(data):
            n = rng.randint(1, 40)
            cuts.append(data[i : i + n])
            i += n
    return b"".join(shaped.feed(c) for c in cuts) + shaped.close()


PIECES = ["whole", "bytes", "random"]
UPSTREAM = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hi."}),
    chunk({}, "stop"),
    {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": USAGE},
)


@pytest.mark.parametrize("pieces", PIECES)
def test_a_pass_through_stream_loses_its_usage_chunk_when_not_asked(pieces: str) -> None:
    out = frames(run(UsageShaped(PassThroughStream(), False), UPSTREAM, pieces))
    assert out == [*frames(UPSTREAM)[:3], "[DONE]"]
    asked = run(UsageShaped(PassThroughStream(), True), UPSTREAM, pieces)
    assert asked == UPSTREAM  # as it came


@pytest.mark.parametrize("sep", [b"\r\n\r\n", b"\n\n"])
def test_crlf_frames_are_shaped_too(sep: bytes) -> None:
    upstream = sse(chunk({"content": "x"}), chunk({}, "stop", usage=USAGE), sep=sep)
    out = run(UsageShaped(PassThroughStream(), False), upstream, "random")
    assert frames(out) == [chunk({"content": "x"}), chunk({}, "stop"), "[DONE]"]
    first = run(UsageShaped(PassThroughStream(), False), upstream[:20], "whole")
    assert first == upstream[:20]  # an unended frame is handed on at the close


def test_null_usage_frames_pass_untouched() -> None:
    upstream = sse(chunk({"content": "x"}, usage=None))
    assert run(UsageShaped(PassThroughStream(), False), upstream, "whole") == upstream


ANTHROPIC = b"".join(
    b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(ev) + b"\n\n"
    for kind, ev in [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "model": "claude", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hi."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]
)  # fmt: skip


@pytest.mark.parametrize("pieces", PIECES)
@pytest.mark.parametrize("asked", [False, True])
def test_anthropic_counts_only_when_asked_in_their_own_chunk(pieces: str, asked: bool) -> None:
    shaped = UsageShaped(provider("anthropic", time.time).chat_stream("claude"), asked)
    out = frames(run(shaped, ANTHROPIC, pieces))
    assert out[-1] == "[DONE]"
    body = out[:-1]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in body if c["choices"]) == "Hi."
    )
    assert [c["choices"][0]["finish_reason"] for c in body if c["choices"]][-1] == "stop"
    assert all("usage" not in c for c in body if c["choices"])
    counted = [c for c in body if not c["choices"]]
    if asked:
        assert [c["usage"]["completion_tokens"] for c in counted] == [3]
        assert body[-1] is counted[0]  # last, after the finish chunk
    else:
        assert counted == []


GEMINI = b"".join(
    b"data: " + orjson.dumps(frame) + b"\r\n\r\n"
    for frame in [
        {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "Hi."}]}}]},
        {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": ""}]},
                         "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3,
                           "totalTokenCount": 13}},
    ]
)  # fmt: skip


@pytest.mark.parametrize("asked", [False, True])
def test_gemini_usage_chunk_only_when_asked(asked: bool) -> None:
    shaped = UsageShaped(provider("gemini", time.time).chat_stream("gemini-x"), asked)
    out = frames(run(shaped, GEMINI, "random"))
    counted = [c for c in out[:-1] if not c["choices"]]
    assert [c["usage"]["completion_tokens"] for c in counted] == ([3] if asked else [])
    assert out[-1] == "[DONE]"
