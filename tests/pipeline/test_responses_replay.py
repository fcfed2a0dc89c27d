"""The replay core: a response object's events equal what the live stream of that response sent
(its deltas joined into one), are valid for the SDK's models, and are numbered from 0."""

from __future__ import annotations

import orjson
import pytest
from support.responses_cases import QWEN_REPLY
from support.responses_replay import merged

from smg.errors import ApiError
from smg.pipeline.engine_types import Finished, TokenDelta
from smg.pipeline.responses_replay import after, frame, replay_events

from .test_responses_output import EVENTS, events_for, shaper, stream


@pytest.mark.parametrize("chunk", [1, 3, 50])
def test_a_replay_equals_the_live_stream_of_reasoning_text_and_a_call(chunk: int) -> None:
    live = stream(shaper(tools=True, model="Qwen3-8B"), events_for(QWEN_REPLY, chunk))
    final = live[-1]["response"]
    assert live[-1]["type"] == "response.completed"
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    replayed = replay_events(final)
    for event in replayed:
        EVENTS.validate_python(event)
    assert replayed == merged(live)


def test_a_replay_of_a_plain_text_answer_and_of_one_cut_short() -> None:
    live = stream(shaper(), events_for("Hello there, world.", 4))
    assert replay_events(live[-1]["response"]) == merged(live)
    cut = stream(shaper(), events_for("Hello", 2, reason="length"))
    assert cut[-1]["type"] == "response.incomplete"
    assert replay_events(cut[-1]["response"]) == merged(cut)


def test_a_cancelled_response_has_no_terminal_event_and_starting_after_keeps_later_ones() -> None:
    live = stream(shaper(), events_for("Hello", 2))
    cancelled = {**live[-1]["response"], "status": "cancelled"}
    events = replay_events(cancelled)
    assert events[-1]["type"] == "response.output_item.done"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert after(events, None) == events
    assert after(events, -1) == events
    assert [e["sequence_number"] for e in after(events, 3)] == list(range(4, len(events)))
    assert after(events, len(events)) == []


def test_a_frame_is_what_a_live_stream_writes() -> None:
    event = replay_events(stream(shaper(), events_for("Hi", 1))[-1]["response"])[0]
    head, data = frame(event).split(b"\n", 1)
    assert head == b"event: response.created"
    assert orjson.loads(data.removeprefix(b"data: ")) == event
    assert frame(event).endswith(b"\n\n")


def test_a_replay_of_a_failed_response_equals_its_live_stream() -> None:
    s = shaper()
    frames = s.on_event(TokenDelta(0, [ord("H"), ord("i")], 7, 2))
    frames += s.on_event(Finished(0, "error", 7, 2, error="engine exploded"))
    frames += s.failure_frames(ApiError(502, "engine_error", "The engine failed"))
    live = [orjson.loads(f.split(b"data: ", 1)[1]) for f in frames]
    assert live[-1]["type"] == "response.failed"
    assert replay_events(live[-1]["response"]) == merged(live)
