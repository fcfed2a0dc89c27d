"""A streamed Gemini answer (`:streamGenerateContent?alt=sse`) as OpenAI chunk frames: role
first, reasoning, content and tool-call deltas, the finish chunk, a usage chunk and [DONE]; the
same frames for every split of the recorded bytes; a stream that breaks off or carries an error
raises at close. The frames are what the gateway's own reader takes."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.chat_answer import SseReader, chunk_step
from smg.pipeline.providers.base import ProviderStreamError
from smg.pipeline.providers.gemini import Gemini
from smg.pipeline.providers.gemini_answer import GeminiStream


def frame(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\r\n\r\n"  # Gemini ends its events with CRLF CRLF


def part(text: str, thought: bool = False) -> dict[str, Any]:
    return {"text": text, "thought": True} if thought else {"text": text}


def candidate(*parts: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish:
        out["finishReason"] = finish
    return out


def usage(prompt: int, out: int, thoughts: int = 0) -> dict[str, Any]:
    meta = {"promptTokenCount": prompt, "candidatesTokenCount": out}
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    meta["totalTokenCount"] = prompt + out + thoughts
    return meta


# the recorded shape of a gemini-2.5-flash stream with thoughts, text and a function call
RECORDED = b"".join(
    [
        frame(
            {
                "candidates": [candidate(part("Weather needs a tool.", thought=True))],
                "usageMetadata": usage(12, 0, 9),
                "modelVersion": "gemini-2.5-flash",
                "responseId": "r1",
            }
        ),
        frame({"candidates": [candidate(part("Let me check "))], "usageMetadata": usage(12, 3, 9)}),
        frame(
            {
                "candidates": [candidate(part("the weather. \u2600"))],
                "usageMetadata": usage(12, 6, 9),
            }
        ),
        frame(
            {
                "candidates": [
                    candidate(
                        {
                            "functionCall": {"name": "get_weather", "args": {"city": "Zürich"}},
                            "thoughtSignature": "EpoBCpcBAb4+9vu",
                        },
                        finish="STOP",
                    )
                ],
                "usageMetadata": usage(12, 14, 9),
                "modelVersion": "gemini-2.5-flash",
            }
        ),
    ]
)


def stream(model: str = "gemini-2.5-flash") -> GeminiStream:
    counter = itertools.count()
    return Gemini(now=lambda: 1700000000.0, new_id=lambda: f"id{next(counter)}").chat_stream(model)


def run(pieces: list[bytes]) -> bytes:
    translator = stream()
    out = b"".join(translator.feed(p) for p in pieces)
    return out + translator.close()


def chunks(raw: bytes) -> list[dict[str, Any]]:
    reader = SseReader()
    payloads = reader.feed(raw)
    assert reader.done
    return [orjson.loads(p) for p in payloads]


def test_a_recorded_stream_becomes_openai_chunks_in_order() -> None:
    out = chunks(run([RECORDED]))
    assert {c["id"] for c in out} == {"chatcmpl-id0"}
    assert {c["object"] for c in out} == {"chat.completion.chunk"}
    assert {c["model"] for c in out} == {"gemini-2.5-flash"}
    assert {c["created"] for c in out} == {1700000000}
    assert [c["choices"] for c in out] == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        [
            {
                "index": 0,
                "delta": {"reasoning_content": "Weather needs a tool."},
                "finish_reason": None,
            }
        ],
        [{"index": 0, "delta": {"content": "Let me check "}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "the weather. \u2600"}, "finish_reason": None}],
        [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_id1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Zürich"}'},
                            "extra_content": {"google": {"thought_signature": "EpoBCpcBAb4+9vu"}},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        [],
    ]
    assert out[-1]["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 23,
        "total_tokens": 35,
        "completion_tokens_details": {"reasoning_tokens": 9},
    }
    steps = [chunk_step(c) for c in out]
    assert "".join(s.delta.normal_text for s in steps) == "Let me check the weather. \u2600"
    assert "".join(s.delta.reasoning_text for s in steps) == "Weather needs a tool."
    assert [c.name for s in steps for c in s.delta.calls] == ["get_weather"]
    assert [s.finish_reason for s in steps if s.finish_reason] == ["tool_calls"]


def test_every_split_of_the_recorded_stream_gives_the_same_frames() -> None:
    whole = run([RECORDED])
    for cut in range(len(RECORDED) + 1):
        assert run([RECORDED[:cut], RECORDED[cut:]]) == whole, cut
    assert run([RECORDED[i : i + 1] for i in range(len(RECORDED))]) == whole


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RECORDED)), max_size=12))
def test_random_chunkings_give_the_same_frames(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(RECORDED)]
    pieces = [RECORDED[a:b] for a, b in itertools.pairwise(bounds)]
    assert run(pieces) == run([RECORDED])


def test_lf_separated_frames_read_the_same_as_crlf_ones() -> None:
    assert run([RECORDED.replace(b"\r\n", b"\n")]) == run([RECORDED])


def test_a_length_finish_after_text_and_two_candidates_each_finish() -> None:
    second = {"content": {"parts": [part("B")]}, "index": 1, "finishReason": "MAX_TOKENS"}
    raw = frame(
        {"candidates": [candidate(part("A")), {"content": {"parts": [part("b")]}, "index": 1}]}
    ) + frame({"candidates": [candidate(part("."), finish="STOP"), second]})
    out = chunks(run([raw]))
    finishes = [(ch["index"], ch["finish_reason"]) for c in out for ch in c["choices"]]
    assert [f for f in finishes if f[1]] == [(0, "stop"), (1, "length")]
    text = {0: "", 1: ""}
    for c in out:
        for ch in c["choices"]:
            text[ch["index"]] += ch["delta"].get("content", "")
    assert text == {0: "A.", 1: "bB"}
    assert "usage" not in out[-1]  # no usageMetadata came: no usage chunk


def test_a_blocked_prompt_stream_is_a_content_filter_finish() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(4, 0)}
    raw = frame(blocked)
    out = chunks(run([raw]))
    assert out[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert out[1]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]
    assert out[2]["usage"]["prompt_tokens"] == 4


def test_a_stream_without_a_finish_reason_raises_at_close() -> None:
    translator = stream()
    cut = RECORDED.rindex(b"data: ")
    assert translator.feed(RECORDED[:cut])  # the frames so far are still translated
    with pytest.raises(ProviderStreamError) as caught:
        translator.close()
    assert (caught.value.status, caught.value.code) == (502, "upstream_error")


def test_an_empty_stream_raises_at_close() -> None:
    with pytest.raises(ProviderStreamError):
        stream().close()


def test_an_error_event_in_the_stream_raises_at_close_with_its_status() -> None:
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}],
        }
    }
    translator = stream()
    head = frame({"candidates": [candidate(part("Hel"))]})
    assert translator.feed(head + frame(error) + frame({"candidates": [candidate(part("lo"))]}))
    assert translator.feed(frame({"candidates": [candidate(part("!"), finish="STOP")]})) == b""
    with pytest.raises(ProviderStreamError) as caught:
        translator.close()
    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")
    assert caught.value.message.endswith("check quota). (retry after 7s)")


def test_a_frame_that_is_not_json_raises_at_close() -> None:
    translator = stream()
    translator.feed(b"data: {not json\r\n\r\n" + frame({"candidates": [candidate(finish="STOP")]}))
    with pytest.raises(ProviderStreamError) as caught:
        translator.close()
    assert caught.value.status == 502
