"""Background responses, replay and cancel end to end: the `openai` SDK
(`responses.create(background=True)`, `responses.retrieve(id)`, `responses.retrieve(id,
stream=True, starting_after=...)`, `responses.cancel(id)`) -> gateway (gRPC mode) -> `smg sim`."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import openai
import pytest
from support.responses_cases import WEATHER
from support.responses_replay import merged

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Launcher, wait_until
from .test_responses import MODEL, SLOW, THINK_AND_CALL, Setup, comparable, setup

__all__ = ["setup"]  # the module-scoped gateway fixture, shared with test_responses

DONE = ("completed", "failed", "cancelled", "incomplete")


def dumped(events: Any) -> list[dict[str, Any]]:
    return [event.model_dump(exclude_none=True) for event in events]


def finished(client: openai.OpenAI, rid: str) -> Any:
    return wait_until(
        lambda: (r := client.responses.retrieve(rid)).status in DONE and r, 20.0, "the response"
    )


def test_a_background_response_runs_to_the_same_answer_as_a_foreground_one(setup: Setup) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "input": THINK_AND_CALL, "tools": [WEATHER]}
    queued = setup.client.responses.create(background=True, **kwargs)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    done = finished(setup.client, queued.id)
    assert done.status == "completed" and done.id == queued.id
    fore = setup.client.responses.create(**kwargs)
    assert fore.background is False
    ours, theirs = comparable(done), comparable(fore)
    for body in (ours, theirs):  # the second run finds the first one's prefix cached
        body["usage"].pop("input_tokens_details")
    assert {**ours, "background": False} == theirs
    # its input items are stored too
    items = setup.client.responses.input_items.list(queued.id)
    assert [i.type for i in items.data] == ["message"]


def test_a_streamed_background_response_sends_its_events_and_is_stored(setup: Setup) -> None:
    events = dumped(
        setup.client.responses.create(
            model=MODEL, input="SIM_REPLY: Hello in the background.", background=True, stream=True
        )
    )
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    rid = events[0]["response"]["id"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Hello in the background."
    assert finished(setup.client, rid).output_text == text


def test_a_replay_equals_the_original_stream_and_starting_after_skips(setup: Setup) -> None:
    live = dumped(
        setup.client.responses.create(
            model=MODEL, input=THINK_AND_CALL, tools=[WEATHER], stream=True
        )
    )
    assert live[-1]["type"] == "response.completed"
    rid = live[0]["response"]["id"]
    replay = dumped(setup.client.responses.retrieve(rid, stream=True))
    assert replay == merged(live)  # types, ids, content: all equal (deltas joined)
    assert len({e["item"]["id"] for e in replay if "item" in e}) == 3
    later = dumped(setup.client.responses.retrieve(rid, stream=True, starting_after=5))
    assert later == replay[6:]
    assert dumped(setup.client.responses.retrieve(rid, stream=True, starting_after=999)) == []


def test_bad_background_and_replay_requests_are_400_or_404(setup: Setup) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.create(model=MODEL, input="x", background=True, store=False)
    assert info.value.code == "invalid_value"
    assert info.value.body["param"] == "background"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        dumped(setup.client.responses.retrieve("resp_unknown", stream=True))
    done = setup.client.responses.create(model=MODEL, input="SIM_REPLY: ok")
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.retrieve(done.id, stream=True, starting_after=-5)
    assert info.value.code == "invalid_value"


def test_a_running_background_response_is_followed_live_and_cancelled(launch: Launcher) -> None:
    engine = launch.engine(SLOW, "vllm", chunk_tokens=1, decode_ms_per_token=50)
    gw = launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir(), max_background_responses=1)
    slow: dict[str, Any] = {"model": SLOW, "input": "SIM_REPLY: " + "word " * 200}
    with gw.client(timeout_s=20.0) as client:
        queued = client.responses.create(background=True, **slow)
        rid = queued.id
        with pytest.raises(openai.RateLimitError) as info:  # one at a time here
            client.responses.create(background=True, **slow)
        assert info.value.code == "too_many_background_responses"
        wait_until(lambda: engine.stats()["in_flight"] == 1, 10.0, "the engine call to start")
        assert client.responses.retrieve(rid).status == "in_progress"
        followed: list[dict[str, Any]] = []
        for event in client.responses.retrieve(rid, stream=True):  # live, from the start
            followed.append(event.model_dump(exclude_none=True))
            if sum(e["type"] == "response.output_text.delta" for e in followed) == 3:
                break
        assert followed[0]["type"] == "response.created"
        assert [e["sequence_number"] for e in followed] == list(range(len(followed)))
        tail = client.responses.retrieve(rid, stream=True, starting_after=2)
        first = next(iter(tail))
        assert first.sequence_number == 3
        tail.close()

        cancelled = client.responses.cancel(rid)
        assert cancelled.status == "cancelled" and cancelled.background is True
        assert cancelled.output[0].status == "incomplete"
        assert cancelled.output_text.startswith("word word")
        wait_until(lambda: engine.stats()["in_flight"] == 0, 5.0, "the engine call to end")
        assert client.responses.retrieve(rid).status == "cancelled"
        assert client.responses.cancel(rid).status == "cancelled"  # twice: the same
        replay = dumped(client.responses.retrieve(rid, stream=True))
        assert replay[-1]["type"] == "response.output_item.done"  # no terminal event
        text = "".join(e["delta"] for e in replay if e["type"] == "response.output_text.delta")
        assert text == cancelled.output_text
        next_one = client.responses.create(background=True, **slow)  # room again
        assert client.responses.cancel(next_one.id).status == "cancelled"


def test_a_stopping_gateway_stores_its_running_background_responses(
    launch: Launcher, tmp_path: Path
) -> None:
    engine = launch.engine(SLOW, "vllm", chunk_tokens=1, decode_ms_per_token=50)
    flags: dict[str, Any] = {
        "history_backend": "sqlite",
        "sqlite_path": tmp_path / "history.db",
        "shutdown_grace_period_secs": 1,
        "tokenizer_path": qwen3_tokenizer_dir(),
    }
    gw = launch.gateway([engine], **flags)
    with gw.client(timeout_s=20.0) as client:
        rid = client.responses.create(
            model=SLOW, input="SIM_REPLY: " + "word " * 200, background=True
        ).id
        wait_until(lambda: engine.stats()["in_flight"] == 1, 10.0, "the engine call to start")
    gw.proc.signal(signal.SIGTERM)
    assert gw.proc.popen.wait(15) == 0
    wait_until(lambda: engine.stats()["in_flight"] == 0, 5.0, "the engine call to end")
    again = launch.gateway([engine], **flags)
    with again.client(timeout_s=20.0) as client:
        stopped = client.responses.retrieve(rid)
    assert stopped.status == "cancelled", stopped.status
    assert stopped.output_text.startswith("word")


def test_a_background_turn_of_a_conversation_and_a_chain_from_it(setup: Setup) -> None:
    conv = setup.client.conversations.create()
    first = setup.client.responses.create(
        model=MODEL, input="SIM_REPLY: First.", conversation=conv.id, background=True
    )
    assert finished(setup.client, first.id).output_text == "First."
    items = setup.client.conversations.items.list(conv.id, order="asc").data
    assert [i.type for i in items] == ["message", "message"]
    assert items[1].model_dump()["content"][0]["text"] == "First."
    second = setup.client.responses.create(
        model=MODEL, input="SIM_REPLY: Second.", previous_response_id=first.id, background=True
    )
    done = finished(setup.client, second.id)
    assert done.output_text == "Second." and done.previous_response_id == first.id


def test_background_mode_off_runs_background_requests_in_the_foreground(launch: Launcher) -> None:
    engine = launch.engine(MODEL, "vllm")
    gw = launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir(), max_background_responses=0)
    with gw.client(timeout_s=20.0) as client:
        done = client.responses.create(model=MODEL, input="SIM_REPLY: now", background=True)
    assert (done.status, done.background, done.output_text) == ("completed", False, "now")
