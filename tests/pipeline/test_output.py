"""The output shaper: streamed text equals whole text, stops never leak, usage adds up."""

from __future__ import annotations

import random
from collections.abc import Sequence

import orjson
import pytest

from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta, TokenLogprob
from smg.pipeline.output import OutputShaper, OutputSpec


def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


def events_for(
    text: str, *, index: int = 0, chunk: int = 3, reason: str = "length"
) -> list[EngineEvent]:
    ids = [ord(c) for c in text]
    out: list[EngineEvent] = []
    for start in range(0, len(ids), chunk):
        out.append(TokenDelta(index, ids[start : start + chunk], 5, min(len(ids), start + chunk)))
    out.append(Finished(index, reason, 5, len(ids)))
    return out


def spec(**kw: object) -> OutputSpec:
    base = {"response_id": "chatcmpl-1", "model": "m", "created": 1, "chat": True}
    base.update(kw)
    return OutputSpec(**base)  # type: ignore[arg-type]


def stream(shaper: OutputShaper, events: list[EngineEvent]) -> list[dict[str, object]]:
    frames: list[bytes] = []
    for ev in events:
        frames += shaper.on_event(ev)
    frames += shaper.closing_frames()
    assert frames[-1] == b"data: [DONE]\n\n"
    return [orjson.loads(f[6:]) for f in frames[:-1]]


def streamed_text(chunks: list[dict[str, object]], index: int = 0) -> str:
    parts = []
    for c in chunks:
        for ch in c["choices"]:  # type: ignore[attr-defined]
            if ch["index"] == index:
                parts.append(ch["delta"].get("content") or "")
    return "".join(parts)


def whole(shaper: OutputShaper, events: list[EngineEvent]) -> dict[str, object]:
    for ev in events:
        shaper.collect(ev)
    return shaper.body()


@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
def test_stream_equals_whole_and_first_chunk_has_role(chunk: int) -> None:
    text = "Hello, world! 你好"
    chunks = stream(OutputShaper(spec(), decode), events_for(text, chunk=chunk))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert streamed_text(chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
    body = whole(OutputShaper(spec(), decode), events_for(text, chunk=chunk))
    assert body["choices"][0]["message"]["content"] == text  # type: ignore[index]
    assert body["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": len(text),
        "total_tokens": 5 + len(text),
    }


@pytest.mark.parametrize("seed", range(20))
def test_stop_string_never_leaks_for_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    text = "abc STOP-HERE and more after"
    events: list[EngineEvent] = []
    ids = [ord(c) for c in text]
    pos = 0
    while pos < len(ids):
        step = rng.randint(1, 5)
        events.append(TokenDelta(0, ids[pos : pos + step], 5, pos + step))
        pos += step
    events.append(Finished(0, "length", 5, len(ids)))
    sp = spec(stop=("STOP-HERE", "zzz"))
    chunks = stream(OutputShaper(sp, decode), events)
    out = streamed_text(chunks)
    assert out == "abc "
    finals = [c["choices"][0] for c in chunks if c["choices"][0]["finish_reason"]]  # type: ignore[index]
    assert len(finals) == 1 and finals[0]["finish_reason"] == "stop"
    assert finals[0]["matched_stop"] == "STOP-HERE"
    body = whole(OutputShaper(sp, decode), events)
    assert body["choices"][0]["message"]["content"] == "abc "  # type: ignore[index]
    shaper = OutputShaper(sp, decode)
    for ev in events:
        shaper.on_event(ev)
    assert shaper.all_done


def test_include_stop_keeps_the_stop_string() -> None:
    body = whole(OutputShaper(spec(stop=("END",), include_stop=True), decode), events_for("xyEND!"))
    assert body["choices"][0]["message"]["content"] == "xyEND"  # type: ignore[index]


def test_two_choices_interleaved_and_usage_sums() -> None:
    a = events_for("first answer", index=0)
    b = events_for("second", index=1, reason="stop")
    mixed = [ev for pair in zip(a, b, strict=False) for ev in pair] + a[len(b) :]
    chunks = stream(OutputShaper(spec(n=2, include_usage=True), decode), mixed)
    assert streamed_text(chunks, 0) == "first answer"
    assert streamed_text(chunks, 1) == "second"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage == {"prompt_tokens": 5, "completion_tokens": 18, "total_tokens": 23}


def test_engine_end_without_finish_closes_choices_as_abort() -> None:
    chunks = stream(OutputShaper(spec(), decode), [TokenDelta(0, [104, 105], 5, 2)])
    assert streamed_text(chunks) == "hi"
    assert chunks[-1]["choices"][0]["finish_reason"] == "abort"  # type: ignore[index]


def test_completions_shape_echo_and_logprobs() -> None:
    sp = spec(chat=False, response_id="cmpl-1", echo_prompt="P:", logprobs=True, top_logprobs=1)
    events: list[EngineEvent] = [
        TokenDelta(
            0,
            [111, 107],
            3,
            2,
            logprobs=[TokenLogprob(111, -0.1, ((111, -0.1),)), TokenLogprob(107, -0.2)],
        ),
        Finished(0, "stop", 3, 2, matched_stop=0),
    ]
    body = whole(OutputShaper(sp, decode), events)
    choice = body["choices"][0]  # type: ignore[index]
    assert body["object"] == "text_completion"
    assert choice["text"] == "P:ok" and choice["finish_reason"] == "stop"
    assert choice["matched_stop"] == 0
    assert choice["logprobs"]["tokens"] == ["o", "k"]
    assert choice["logprobs"]["top_logprobs"][0] == {"o": -0.1}
    chunks = stream(OutputShaper(sp, decode), events)
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == "ok"  # type: ignore[index]


@pytest.mark.parametrize("text", ["ok", ' "quoted" \\ back', "héllo ✓ 🙂", "line\nbreak\ttab\x01"])
def test_plain_content_frames_are_the_generic_frames_byte_for_byte(text: str) -> None:
    # the per-token fast path builds a content delta's frame around the encoded text only; every
    # byte must be what the generic frame gives, for any choice index
    shaper = OutputShaper(spec(n=3), decode)
    for index in (0, 2):
        first = TokenDelta(index, [ord("a")], 5, 1)
        shaper.on_event(first)  # the role frame and the first text
        ids = [ord(c) for c in text]
        frames = shaper.on_event(TokenDelta(index, ids, 5, 1 + len(ids)))
        assert frames == [shaper._frame(index, text)]
