"""The Responses renderer: output items in the order the model spoke, the typed event stream
(valid for the SDK's models, numbered in order), and a stream's final response equal to the
whole answer for any chunking."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from support.engine_events import decode, events_for
from support.responses_cases import QWEN_REPLY, WEATHER

from smg.errors import ApiError
from smg.pipeline.chat_answer import ChatStep
from smg.pipeline.choice import OutputSpec
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.parser_choice import ParserChoice, tool_choice
from smg.pipeline.parsers.types import CallDelta, ParseDelta
from smg.pipeline.responses_output import ResponsesShaper
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import chat_body, parse_responses

EVENTS = TypeAdapter(ResponseStreamEvent)


def shaper(tools: bool = False, model: str = "plain-model", **fields: Any) -> ResponsesShaper:
    body: dict[str, Any] = {"model": model, "input": "hi", **fields}
    if tools:
        body["tools"] = [WEATHER]
    req = parse_responses(body)
    spec = OutputSpec(response_id="e1", model=model, created=1700000000, chat=True)
    chat = chat_body(req)
    if tools:
        choice = tool_choice(chat, chat["tools"])
        factory = ParserChoice().factory(chat, model, "", chat["tools"], choice, "e1")
        spec = dataclasses.replace(spec, parser=factory)
    return ResponsesRenderer(req, "resp_ab")(spec, decode, lambda: 0.0)


def stream(s: ResponsesShaper, events: list[EngineEvent]) -> list[dict[str, Any]]:
    frames: list[bytes] = []
    for ev in events:
        frames += s.on_event(ev)
        if s.all_done:
            break
    frames += s.closing_frames()
    out = []
    for f in frames:
        head, data = f.split(b"\n", 1)
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + payload["type"].encode()
        assert f.endswith(b"\n\n")
        EVENTS.validate_python(payload)  # the SDK's own event models accept it
        out.append(payload)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def whole(s: ResponsesShaper, events: list[EngineEvent]) -> dict[str, Any]:
    for ev in events:
        s.collect(ev)
        if s.all_done:
            break
    body = s.whole()
    assert body is not None
    out: dict[str, Any] = orjson.loads(body)
    Response.model_validate(out)
    return out


def without_call_ids(response: dict[str, Any]) -> dict[str, Any]:
    """The response with its call ids blanked (each parser factory draws its own prefix)."""
    output = [
        {**item, "call_id": "-"} if "call_id" in item else item for item in response["output"]
    ]
    return {**response, "output": output}


def test_plain_text_is_one_message_and_the_exact_event_sequence() -> None:
    events = events_for("Hello there.", 4)
    got = stream(shaper(), events)
    assert [e["type"] for e in got] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert got[0]["response"]["status"] == "in_progress" and got[0]["response"]["output"] == []
    assert "".join(e["delta"] for e in got if e["type"].endswith(".delta")) == "Hello there."
    final = got[-1]["response"]
    assert final == whole(shaper(), events)
    assert final["status"] == "completed" and final["id"] == "resp_ab"
    assert final["output"] == [
        {
            "id": "msg_ab00",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Hello there.", "annotations": [], "logprobs": []}
            ],
            "status": "completed",
        }
    ]
    assert final["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 19,
    }


@pytest.mark.parametrize("chunk", [1, 2, 5, 300])
def test_reasoning_text_and_a_tool_call_become_three_items_for_any_chunking(chunk: int) -> None:
    events = events_for(QWEN_REPLY, chunk)
    got = stream(shaper(tools=True, model="Qwen3-8B"), events)
    final = got[-1]["response"]
    body = whole(shaper(tools=True, model="Qwen3-8B"), events)
    assert without_call_ids(final) == without_call_ids(body)
    rs, msg, fc = body["output"]
    assert rs["type"] == "reasoning" and rs["id"] == "rs_ab00"
    assert rs["content"] == [{"type": "reasoning_text", "text": "The user wants the weather."}]
    assert msg["content"][0]["text"] == "Let me look."
    assert fc["type"] == "function_call" and fc["id"] == "fc_ab02"
    assert (fc["name"], orjson.loads(fc["arguments"])) == ("get_weather", {"city": "Oslo"})
    assert fc["call_id"].startswith("call_") and fc["status"] == "completed"
    # the events tell the same story, item by item
    added = [e["item"]["type"] for e in got if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message", "function_call"]
    reasoning = "".join(e["delta"] for e in got if e["type"] == "response.reasoning_text.delta")
    assert reasoning == "The user wants the weather."
    args = "".join(e["delta"] for e in got if e["type"] == "response.function_call_arguments.delta")
    assert args == fc["arguments"]
    done = [e for e in got if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == fc["arguments"] and done[0]["name"] == "get_weather"
    assert 0 < body["usage"]["output_tokens_details"]["reasoning_tokens"] < len(QWEN_REPLY)


def test_max_output_tokens_makes_an_incomplete_response() -> None:
    events = events_for("Cut short", 3, reason="length")
    got = stream(shaper(max_output_tokens=9), events)
    assert got[-1]["type"] == "response.incomplete"
    final = got[-1]["response"]
    assert final == whole(shaper(max_output_tokens=9), events)
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"
    assert final["max_output_tokens"] == 9


def test_an_engine_failure_mid_stream_ends_with_response_failed() -> None:
    s = shaper()
    frames = s.on_event(TokenDelta(0, [ord("H"), ord("i")], 7, 2))
    frames += s.on_event(Finished(0, "error", 7, 2, error="engine exploded: secret detail"))
    assert s.error is not None
    frames += s.failure_frames(ApiError(502, "engine_error", "The engine failed"))
    frames += s.closing_frames()
    last = orjson.loads(frames[-1].split(b"data: ", 1)[1])
    assert last["type"] == "response.failed"
    assert last["response"]["status"] == "failed"
    assert last["response"]["error"] == {"code": "server_error", "message": "The engine failed"}
    assert b"secret detail" not in b"".join(frames)
    EVENTS.validate_python(last)


def test_a_whole_answer_that_failed_with_nothing_to_show_is_an_error() -> None:
    s = shaper()
    s.collect(Finished(0, "error", 7, 0, error="boom"))
    assert s.whole() is None


def test_whitespace_between_reasoning_and_a_call_opens_no_message() -> None:
    reply = (
        "<think>\nhmm\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    body = whole(shaper(tools=True, model="Qwen3-8B"), events_for(reply, 1))
    assert [item["type"] for item in body["output"]] == ["reasoning", "function_call"]


def test_the_response_echoes_the_request_settings() -> None:
    body = whole(
        shaper(
            instructions="Be brief.",
            metadata={"k": "v"},
            user="u1",
            temperature=0.2,
            store=False,
            text={"format": {"type": "json_object"}},
        ),
        events_for("{}", 2),
    )
    assert body["instructions"] == "Be brief." and body["metadata"] == {"k": "v"}
    assert (body["user"], body["temperature"], body["store"]) == ("u1", 0.2, False)
    assert body["text"] == {"format": {"type": "json_object"}}
    assert body["created_at"] == 1700000000 and body["model"] == "plain-model"


def test_a_cancelled_response_keeps_what_was_said_and_renders_no_more() -> None:
    s = shaper()
    for ev in events_for("word word word", 2)[:3]:
        s.on_event(ev)
    body = s.cancelled()
    assert body["status"] == "cancelled"
    [msg] = body["output"]
    assert msg["status"] == "incomplete" and msg["content"][0]["text"] == "word w"
    Response.model_validate(body)
    assert s.closing_frames() == []  # ended: no terminal event after a cancel


# --- HTTP mode: a worker's chat answer ------------------------------------------------------------
CHAT_USAGE = {
    "prompt_tokens": 11,
    "completion_tokens": 20,
    "total_tokens": 31,
    "prompt_tokens_details": {"cached_tokens": 3},
    "completion_tokens_details": {"reasoning_tokens": 6},
}


def chat_shaper(**fields: Any) -> ResponsesShaper:
    req = parse_responses({"model": "m", "input": "hi", "tools": [WEATHER], **fields})
    return ResponsesRenderer(req, "resp_ab").for_chat(1700000000)


def chat_chunks(text_chunks: list[str], reason: str) -> list[ChatStep]:
    steps = [ChatStep(ParseDelta(reasoning_text="Think ")), ChatStep(ParseDelta("", "more."))]
    steps += [ChatStep(ParseDelta(t)) for t in text_chunks]
    steps.append(ChatStep(ParseDelta(calls=(CallDelta(0, "call_1", "get_weather", ""),))))
    steps += [
        ChatStep(ParseDelta(calls=(CallDelta(0, None, None, a),))) for a in ('{"ci', 'ty": 1}')
    ]
    steps.append(ChatStep(ParseDelta(), reason))
    steps.append(ChatStep(ParseDelta(), None, CHAT_USAGE))
    return steps


def chat_stream(s: ResponsesShaper, steps: list[ChatStep]) -> list[dict[str, Any]]:
    frames: list[bytes] = []
    for step in steps:
        frames += s.chat_frames(step)
    frames += s.closing_frames()
    out = [orjson.loads(f.split(b"\ndata: ", 1)[1]) for f in frames]
    for payload in out:
        EVENTS.validate_python(payload)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


@pytest.mark.parametrize("text_chunks", [["Sunny", " in Paris."], ["Sunny in Paris."]])
def test_a_chat_answer_becomes_reasoning_message_and_call_items_streamed_equal_to_whole(
    text_chunks: list[str],
) -> None:
    got = chat_stream(chat_shaper(), chat_chunks(text_chunks, "tool_calls"))
    final = got[-1]["response"]
    assert got[-1]["type"] == "response.completed"
    collected = chat_shaper()
    whole_step = ChatStep(
        ParseDelta(
            "Sunny in Paris.",
            "Think more.",
            (CallDelta(0, "call_1", "get_weather", '{"city": 1}'),),
        ),
        "tool_calls",
        CHAT_USAGE,
    )
    collected.collect_chat(whole_step)
    body = collected.whole()
    assert body is not None
    assert orjson.loads(body) == final
    Response.model_validate(final)
    assert [(i["type"], i["status"]) for i in final["output"]] == [
        ("reasoning", "completed"),
        ("message", "completed"),
        ("function_call", "completed"),
    ]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": "Think more."}]
    assert final["output"][1]["content"][0]["text"] == "Sunny in Paris."
    call = final["output"][2]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_1",
        "get_weather",
        '{"city": 1}',
    )
    assert final["usage"] == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 6},
        "total_tokens": 31,
    }
    deltas = [e["delta"] for e in got if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"ci', 'ty": 1}']


def test_a_chat_answer_cut_by_length_is_incomplete() -> None:
    s = chat_shaper(max_output_tokens=3)
    got = chat_stream(s, [ChatStep(ParseDelta("Sun")), ChatStep(ParseDelta(), "length")])
    assert got[-1]["type"] == "response.incomplete"
    final = got[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"


def test_a_chat_stream_that_ends_without_a_finish_still_closes_its_items() -> None:
    got = chat_stream(chat_shaper(), [ChatStep(ParseDelta("Hi"))])
    assert got[-1]["type"] == "response.completed"
    assert got[-1]["response"]["output"][0]["content"][0]["text"] == "Hi"
