"""A worker's chat answer read back as parser output: whole answers, stream chunks, and the
event-stream reader (the same payloads for any chunking of its bytes)."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.chat_answer import (
    MAX_SSE_LINE,
    ChatAnswerError,
    SseReader,
    chunk_step,
    payload_json,
    whole_step,
)
from smg.pipeline.parsers.types import CallDelta, ParseDelta

USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def test_a_whole_answer_is_one_step_with_text_reasoning_calls_and_usage() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Sunny.",
                    "reasoning_content": "Check the weather.",
                    "tool_calls": [
                        {
                            "id": "call_x",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE,
    }
    step = whole_step(body)
    assert step.delta == ParseDelta(
        "Sunny.",
        "Check the weather.",
        (CallDelta(0, "call_x", "get_weather", '{"city": "Paris"}'),),
    )
    assert step.finish_reason == "tool_calls" and step.usage == USAGE


def test_a_null_content_is_no_text() -> None:
    body = {"choices": [{"index": 0, "message": {"content": None}, "finish_reason": "stop"}]}
    assert whole_step(body).delta == ParseDelta()


def test_stream_chunks_carry_increments_and_a_usage_only_chunk_has_no_choice() -> None:
    first = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}],
                },
                "finish_reason": None,
            }
        ]
    }
    more = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    assert chunk_step(first).delta.calls == (CallDelta(0, "c1", "f", ""),)
    step = chunk_step(more)
    assert step.delta.calls == (CallDelta(0, None, None, "{}"),)
    assert step.finish_reason == "tool_calls"
    usage_only = chunk_step({"choices": [], "usage": USAGE})
    assert usage_only.delta == ParseDelta() and usage_only.usage == USAGE


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"choices": "x"},
        {"choices": []},
        {"choices": [{"index": 0, "message": {"content": 3}}]},
        {"choices": [{"index": 0, "message": "hi"}]},
    ],
)
def test_an_answer_not_of_the_chat_shape_is_refused(body: object) -> None:
    with pytest.raises(ChatAnswerError):
        whole_step(body)


def test_a_streamed_call_without_an_index_is_refused() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "c"}]}}]}
    with pytest.raises(ChatAnswerError):
        chunk_step(chunk)


STREAM = (
    b": keep-alive\n\n"
    b'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
    b'data: {"choices": [{"index": 0, "delta": {"content": "lo \\u00e9"}}]}\r\n\r\n'
    b"data: [DONE]\n\n"
    b'data: {"ignored": true}\n\n'
)


def read_all(chunks: list[bytes]) -> tuple[list[object], bool]:
    reader = SseReader()
    out: list[object] = []
    for c in chunks:
        out += [payload_json(p) for p in reader.feed(c)]
    return out, reader.done


@settings(max_examples=examples(200))
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM)), max_size=20))
def test_the_reader_yields_the_same_payloads_for_any_chunking(cuts: list[int]) -> None:
    bounds = sorted({0, len(STREAM), *cuts})
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert read_all(chunks) == read_all([STREAM])
    payloads, done = read_all([STREAM[i : i + 1] for i in range(len(STREAM))])
    assert done
    assert payloads == [
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo é"}}]},
    ]


def test_the_reader_refuses_a_payload_that_is_not_json_and_an_endless_line() -> None:
    [bad] = SseReader().feed(b"data: {nope\n\n")
    with pytest.raises(ChatAnswerError):
        payload_json(bad)
    with pytest.raises(ChatAnswerError):
        SseReader().feed(b"data: " + b"x" * MAX_SSE_LINE)
    assert SseReader().feed(orjson.dumps({"a": 1})) == []  # no line end yet: nothing
