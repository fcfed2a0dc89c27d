"""`POST /v1/responses` in HTTP mode: the official `openai` SDK -> gateway -> an HTTP worker (the
HTTP simulator) that serves chat completions only. The gateway sends it the chat body and reads
its answer back into the same Responses items and events as token mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from .conftest import Gateway, Launcher, Sim, wait_until

MODEL = "http-only-model"


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim(MODEL)


@pytest.fixture(scope="module")
def gw(module_launch: Launcher, sim: Sim) -> Iterator[Gateway]:
    yield module_launch.gateway([sim])


@pytest.fixture(scope="module")
def client(gw: Gateway) -> Iterator[openai.OpenAI]:
    with gw.client(timeout_s=20.0) as client:
        yield client


def comparable(response: Any) -> dict[str, Any]:
    body = response.model_dump(exclude_none=True)
    body.pop("id"), body.pop("created_at"), body.pop("completed_at", None)
    for item in body["output"]:
        item.pop("id")
    return body


def test_a_text_answer_whole_and_streamed_alike(client: openai.OpenAI) -> None:
    args: dict[str, Any] = {"model": MODEL, "input": "Say something.", "instructions": "Be brief."}
    resp = client.responses.create(**args)
    assert resp.id.startswith("resp_") and resp.status == "completed"
    [msg] = resp.output
    assert msg.type == "message" and msg.status == "completed" and msg.id.startswith("msg_")
    assert resp.output_text.strip()  # the sim's words
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens

    with client.responses.stream(**args) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert comparable(final) == comparable(resp)


def test_max_output_tokens_cuts_the_answer_as_incomplete(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input="Talk.", max_output_tokens=3)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage is not None and resp.usage.output_tokens == 3


def test_a_second_turn_through_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="First question.")
    second = client.responses.create(
        model=MODEL, input="Second question.", previous_response_id=first.id
    )
    alone = client.responses.create(model=MODEL, input="Second question.", store=False)
    assert second.previous_response_id == first.id and second.status == "completed"
    # the worker saw the first turn too: more prompt than the same input alone
    assert second.usage is not None and alone.usage is not None
    assert second.usage.input_tokens > alone.usage.input_tokens
    assert client.responses.retrieve(second.id).output_text == second.output_text
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["message"]


def test_a_response_not_stored_cannot_be_chained(client: openai.OpenAI) -> None:
    loose = client.responses.create(model=MODEL, input="hi", store=False)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="again", previous_response_id=loose.id)
    assert info.value.code == "previous_response_not_found"


def test_a_conversation_gets_the_turns_appended(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="One.", conversation=conversation.id)
    with client.responses.stream(model=MODEL, input="Two.", conversation=conversation.id) as stream:
        for _ in stream:
            pass
        second = stream.get_final_response()
    assert second.status == "completed"
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn came along
    items = client.conversations.items.list(conversation.id, order="asc")
    said = [(i.type, getattr(i, "role", None)) for i in items.data]
    assert said == [("message", "user"), ("message", "assistant")] * 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_worker_error_reaches_the_client_in_its_own_words(
    client: openai.OpenAI, sim: Sim, stream: bool
) -> None:
    sim.configure(status_override=400)
    try:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=MODEL, input="hi", stream=stream)
    finally:
        sim.configure(status_override=None)
    assert info.value.code == "sim_status_override"


def test_a_background_response_and_its_replay(client: openai.OpenAI) -> None:
    queued = client.responses.create(model=MODEL, input="Say something.", background=True)
    assert queued.status == "queued"
    done = wait_until(
        lambda: (
            (r := client.responses.retrieve(queued.id)).status != "queued"
            and r.status != "in_progress"
            and r
        ),
        20.0,
        "the background response",
    )
    assert done.status == "completed" and done.output_text.strip()
    events = list(client.responses.retrieve(queued.id, stream=True))
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == done.output_text
