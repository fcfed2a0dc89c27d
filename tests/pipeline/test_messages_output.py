"""The Messages renderer: content blocks in the order the model spoke, Anthropic's event stream
(valid for the SDK's event models), and a stream that adds up (by the SDK's own accumulator) to
the whole message for any chunking, in token mode and from an HTTP worker's chat answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter
from support.engine_events import decode, events_for
from support.messages_cases import THINKING, WEATHER
from support.responses_cases import QWEN_REPLY

from smg.errors import ApiError
from smg.pipeline.chat_answer import ChatStep, whole_step
from smg.pipeline.choice import OutputSpec
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.messages_output import MessagesRenderer, MessagesShaper
from smg.pipeline.messages_request import chat_body, parse_messages
from smg.pipeline.parser_choice import ParserChoice, tool_choice
from smg.pipeline.parsers.types import CallDelta, ParseDelta

EVENTS = TypeAdapter(RawMessageStreamEvent)


def shaper(model: str = "plain-model", **fields: Any) -> MessagesShaper:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }
    req = parse_messages(body)
    spec = OutputSpec(response_id="e1", model=model, created=1700000000, chat=True, stop=("STOP",))
    chat = chat_body(req)
    if "tools" in chat:
        choice = tool_choice(chat, chat["tools"])
        factory = ParserChoice().factory(chat, model, "", chat["tools"], choice, "e1")
        spec = dataclasses.replace(spec, parser=factory)
    return MessagesRenderer(req, "msg_ab")(spec, decode, lambda: 0.0)


def payloads(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for f in frames:
        head, data = f.split(b"\n", 1)
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + payload["type"].encode()
        assert f.endswith(b"\n\n")
        if payload["type"] not in ("ping", "error"):  # the SDK skips ping; error raises
            EVENTS.validate_python(payload)  # the SDK's own event models accept it
        out.append(payload)
    return out


def stream(s: MessagesShaper, events: list[EngineEvent]) -> list[dict[str, Any]]:
    frames: list[bytes] = []
    for ev in events:
        frames += s.on_event(ev)
        if s.all_done:
            break
    return payloads(frames + s.closing_frames())


def accumulated(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the SDK's stream accumulator adds the events up to."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for ev in events:
        if ev["type"] != "ping":
            snapshot = accumulate_event(
                event=EVENTS.validate_python(ev), current_snapshot=snapshot, json_bufs=bufs
            )
    out: dict[str, Any] = Message.model_validate(snapshot.model_dump()).model_dump(
        exclude_none=True
    )
    return out


def whole(s: MessagesShaper, events: list[EngineEvent]) -> dict[str, Any]:
    for ev in events:
        s.collect(ev)
        if s.all_done:
            break
    body = s.whole()
    assert body is not None
    out: dict[str, Any] = orjson.loads(body)
    return Message.model_validate(out).model_dump(exclude_none=True)


def test_plain_text_is_one_text_block_and_the_exact_event_sequence() -> None:
    events = stream(shaper(), events_for("Hello there.", 4))
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 3
    start = events[0]["message"]
    assert start["id"] == "msg_ab" and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 5 and start["usage"]["cache_read_input_tokens"] == 2
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 12
    body = whole(shaper(), events_for("Hello there.", 4))
    assert body["content"] == [{"type": "text", "text": "Hello there."}]
    assert body["usage"] == {
        "input_tokens": 5,
        "output_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2,
    }
    assert accumulated(events) == body


@pytest.mark.parametrize("chunk", [1, 2, 5, 300])
def test_thinking_text_and_a_tool_use_for_any_chunking(chunk: int) -> None:
    fields = {"tools": [WEATHER], "thinking": THINKING}
    body = whole(shaper("Qwen3-8B", **fields), events_for(QWEN_REPLY, chunk))
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    thinking, text, call = body["content"]
    assert thinking["thinking"] == "The user wants the weather." and thinking["signature"] == ""
    assert text["text"] == "Let me look."
    assert call["name"] == "get_weather" and call["input"] == {"city": "Oslo"}
    assert body["stop_reason"] == "tool_use"
    events = stream(shaper("Qwen3-8B", **fields), events_for(QWEN_REPLY, chunk))
    deltas = {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"}
    assert deltas == {"thinking_delta", "text_delta", "input_json_delta"}
    streamed = accumulated(events)
    for got in (streamed, body):  # each parser factory draws its own call ids
        got["content"][2].pop("id")
    assert streamed == body


def test_without_thinking_the_reasoning_is_not_shown() -> None:
    body = whole(shaper("Qwen3-8B", tools=[WEATHER]), events_for(QWEN_REPLY, 3))
    assert [b["type"] for b in body["content"]] == ["text", "tool_use"]


def test_max_tokens_and_stop_sequences() -> None:
    cut = whole(shaper(), events_for("Hello", 2, reason="length"))
    assert cut["stop_reason"] == "max_tokens"
    stopped = whole(shaper(stop_sequences=["STOP"]), events_for("one STOP two", 1))
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == "STOP"
    assert stopped["content"] == [{"type": "text", "text": "one "}]


def test_an_engine_failure_mid_stream_ends_with_an_error_event() -> None:
    s = shaper()
    frames = s.on_event(TokenDelta(0, [ord("a")], 3, 1))
    frames += s.on_event(Finished(0, "error", 3, 1, error="boom"))
    assert s.error == "boom"
    frames += s.failure_frames(ApiError(502, "engine_error", "The engine failed"))
    events = payloads(frames)
    assert events[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "The engine failed"},
    }
    failed = shaper()
    failed.collect(Finished(0, "error", 3, 0, error="boom"))
    assert failed.whole() is None  # the flow answers the error


def chat_stream(s: MessagesShaper, steps: list[ChatStep]) -> list[dict[str, Any]]:
    frames: list[bytes] = []
    for step in steps:
        frames += s.chat_frames(step)
    return payloads(frames + s.closing_frames())


def test_a_chat_answer_streamed_equals_whole() -> None:
    call = CallDelta(0, "call_1", "get_weather", "")
    steps = [
        ChatStep(ParseDelta(reasoning_text="Think.")),
        ChatStep(ParseDelta(normal_text="Let me look.")),
        ChatStep(ParseDelta(calls=(call,))),
        ChatStep(ParseDelta(calls=(CallDelta(0, None, None, '{"city": '),))),
        ChatStep(ParseDelta(calls=(CallDelta(0, None, None, '"Oslo"}'),)), "tool_calls"),
        ChatStep(ParseDelta(), usage={"prompt_tokens": 9, "completion_tokens": 4}),
    ]
    renderer = MessagesRenderer(
        parse_messages(
            {
                "model": "m",
                "max_tokens": 2000,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [WEATHER],
                "thinking": THINKING,
            }
        ),
        "msg_cd",
    )
    streamed = accumulated(chat_stream(renderer.for_chat(1), steps))
    s = renderer.for_chat(1)
    for step in steps:
        s.collect_chat(step)
    body = s.whole()
    assert body is not None
    expected = Message.model_validate(orjson.loads(body)).model_dump(exclude_none=True)
    assert streamed == expected
    assert [b["type"] for b in expected["content"]] == ["thinking", "text", "tool_use"]
    assert expected["content"][2]["input"] == {"city": "Oslo"}
    assert expected["usage"]["input_tokens"] == 9 and expected["usage"]["output_tokens"] == 4


def test_a_chat_answer_stopped_by_a_stop_sequence() -> None:
    raw = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["END"],
    }
    s = MessagesRenderer(parse_messages(raw), "msg_ef").for_chat(1)
    worker = {
        "choices": [{"message": {"content": "one"}, "finish_reason": "stop", "stop_reason": "END"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    s.collect_chat(whole_step(worker))
    body = s.whole()
    assert body is not None
    message = orjson.loads(body)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
