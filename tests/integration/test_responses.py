"""`POST /v1/responses` end to end: the official `openai` SDK (`client.responses.create`, and
`client.responses.stream` with its own event accumulator) -> gateway (gRPC mode) -> a simulated
Qwen3 engine that answers exactly the text after `SIM_REPLY:` (one token per message, so every
marker is split as finely as the tokenizer allows). The model name detects the qwen3 reasoning
parser and the qwen tool-call parser; the gateway loads the bundled Qwen3 tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from support.responses_cases import QWEN_REPLY, WEATHER

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Engine, Gateway, Launcher, wait_until

MODEL = "Qwen3-8B-sim"
THINK_AND_CALL = f"SIM_REPLY: {QWEN_REPLY}"


@dataclass
class Setup:
    gw: Gateway
    client: openai.OpenAI
    engine: Engine


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    engine = module_launch.engine(MODEL, "vllm", chunk_tokens=1)
    gw = module_launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir())
    with gw.client(timeout_s=20.0) as client:
        yield Setup(gw, client, engine)


def comparable(response: Any) -> dict[str, Any]:
    """A response without what differs between two runs of one request (ids, times)."""
    body = response.model_dump(exclude_none=True)
    body.pop("id"), body.pop("created_at"), body.pop("completed_at", None)
    for item in body["output"]:
        item.pop("id")
        item.pop("call_id", None)
    return body


def test_a_text_answer(setup: Setup) -> None:
    resp = setup.client.responses.create(
        model=MODEL, input="SIM_REPLY: Hello from the sim.", instructions="Be brief."
    )
    assert resp.id.startswith("resp_") and resp.object == "response"
    assert resp.status == "completed"
    assert resp.output_text == "Hello from the sim."
    [msg] = resp.output
    assert msg.type == "message" and msg.id.startswith("msg_") and msg.status == "completed"
    assert resp.instructions == "Be brief." and resp.model == MODEL
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_reasoning_text_and_a_function_call(setup: Setup) -> None:
    resp = setup.client.responses.create(
        model=MODEL, input=THINK_AND_CALL, tools=[WEATHER], temperature=0
    )
    assert [item.type for item in resp.output] == ["reasoning", "message", "function_call"]
    rs, _, fc = resp.output
    assert rs.type == "reasoning" and rs.content is not None
    assert rs.content[0].text == "The user wants the weather."
    assert resp.output_text == "Let me look."
    assert fc.type == "function_call" and fc.name == "get_weather"
    assert fc.arguments == '{"city": "Oslo"}' and fc.call_id.startswith("call_")
    assert resp.usage is not None and resp.usage.output_tokens_details.reasoning_tokens > 0


def test_the_streamed_response_equals_the_whole_one(setup: Setup) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "input": THINK_AND_CALL, "tools": [WEATHER]}
    setup.client.responses.create(**kwargs)  # the prompt cached, for both (cached_tokens)
    whole = setup.client.responses.create(**kwargs)
    kinds: list[str] = []
    text: list[str] = []
    args: list[str] = []
    with setup.client.responses.stream(**kwargs) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.function_call_arguments.delta":
                args.append(event.delta)
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in (
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ):
        assert kind in kinds
    assert kinds.count("response.output_item.added") == 3
    assert "".join(text) == "Let me look." and "".join(args) == '{"city": "Oslo"}'
    assert comparable(final) == comparable(whole)


def test_a_second_turn_carries_the_call_and_its_output(setup: Setup) -> None:
    first = setup.client.responses.create(model=MODEL, input=THINK_AND_CALL, tools=[WEATHER])
    call = first.output[2]
    assert call.type == "function_call"
    items: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "5C"})
    items.append({"role": "user", "content": "SIM_REPLY: It is 5C in Oslo."})
    second = setup.client.responses.create(model=MODEL, input=items, tools=[WEATHER])
    assert second.output_text == "It is 5C in Oslo."
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the history was rendered


@pytest.mark.parametrize(
    ("kwargs", "code", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "unsupported_parameter", "tools[0]"),
        ({"extra_body": {"frobnicate": 1}}, "unknown_parameter", "frobnicate"),
        ({"temperature": 5}, "decimal_above_max_value", "temperature"),
        ({"input": []}, "empty_array", "input"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_in_openai_shape(
    setup: Setup, kwargs: dict[str, Any], code: str, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.create(**{"model": MODEL, "input": "hi", **kwargs})
    assert info.value.status_code == 400
    assert info.value.code == code and info.value.param == param


def test_an_unknown_model_is_a_404(setup: Setup) -> None:
    with pytest.raises(openai.NotFoundError):
        setup.client.responses.create(model="no-such-model", input="hi")


def test_a_three_turn_chain_through_previous_response_id(setup: Setup) -> None:
    client = setup.client
    first = client.responses.create(model=MODEL, input=THINK_AND_CALL, tools=[WEATHER])
    call = first.output[2]
    assert call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "5C"},
            {"role": "user", "content": "SIM_REPLY: It is 5C in Oslo."},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert second.previous_response_id == first.id
    assert second.output_text == "It is 5C in Oslo."
    third = client.responses.create(
        model=MODEL,
        previous_response_id=second.id,
        input="SIM_REPLY: You are welcome.",
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert third.output_text == "You are welcome."
    assert second.usage is not None and third.usage is not None and first.usage is not None
    # each turn renders the whole chain before its own input
    assert first.usage.input_tokens < second.usage.input_tokens < third.usage.input_tokens

    got = client.responses.retrieve(third.id)
    assert got.model_dump() == third.model_dump()
    items = client.responses.input_items.list(second.id, order="asc")
    assert [i.type for i in items.data] == ["function_call_output", "message"]
    assert all(i.id for i in items.data)

    deleted = setup.gw.request("DELETE", f"/v1/responses/{second.id}")
    assert deleted.status == 200 and deleted.json()["deleted"] is True
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.BadRequestError) as info:  # the chain through it is broken now
        client.responses.create(model=MODEL, previous_response_id=third.id, input="hi")
    assert info.value.code == "previous_response_not_found"


def test_store_false_keeps_nothing_and_cannot_be_chained(setup: Setup) -> None:
    resp = setup.client.responses.create(model=MODEL, input="SIM_REPLY: gone", store=False)
    assert resp.store is False
    with pytest.raises(openai.NotFoundError) as missing:
        setup.client.responses.retrieve(resp.id)
    assert missing.value.code == "response_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.create(model=MODEL, previous_response_id=resp.id, input="hi")
    assert info.value.code == "previous_response_not_found"
    assert info.value.param == "previous_response_id"


def test_a_streamed_response_is_stored_too(setup: Setup) -> None:
    with setup.client.responses.stream(model=MODEL, input="SIM_REPLY: streamed") as stream:
        final = stream.get_final_response()
    assert setup.client.responses.retrieve(final.id).output_text == "streamed"


def test_tenants_never_see_each_others_responses(setup: Setup, module_launch: Launcher) -> None:
    tenants = [["red:red-key-0123456789"], ["blue:blue-key-0123456789"]]
    gw = module_launch.gateway(
        [setup.engine], tokenizer_path=qwen3_tokenizer_dir(), tenant_api_key=tenants
    )

    def client(key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=20.0)

    with client("red-key-0123456789") as red, client("blue-key-0123456789") as blue:
        mine = red.responses.create(model=MODEL, input="SIM_REPLY: red only")
        assert red.responses.retrieve(mine.id).output_text == "red only"
        with pytest.raises(openai.NotFoundError):
            blue.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            blue.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError) as info:
            blue.responses.create(model=MODEL, previous_response_id=mine.id, input="hi")
        assert info.value.code == "previous_response_not_found"
        red.responses.delete(mine.id)
        with pytest.raises(openai.NotFoundError):
            red.responses.retrieve(mine.id)


SLOW = "Qwen3-slow-sim"  # 200 words at 50 ms a token: 10 s unless something ends it


def slow_gateway(launch: Launcher) -> tuple[Engine, Gateway]:
    engine = launch.engine(SLOW, "vllm", chunk_tokens=1, decode_ms_per_token=50)
    return engine, launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir())


def slow_stream(client: openai.OpenAI) -> Any:
    return client.responses.create(model=SLOW, input="SIM_REPLY: " + "word " * 200, stream=True)


def test_an_engine_killed_mid_stream_ends_it_with_response_failed(launch: Launcher) -> None:
    engine, gw = slow_gateway(launch)
    with gw.client(timeout_s=10.0) as client:
        stream = slow_stream(client)
        kinds: list[str] = []
        rid = ""
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.created":
                rid = event.response.id
            if event.type == "response.output_text.delta" and engine.proc.alive:
                engine.kill()
            if event.type == "response.failed":
                assert event.response.status == "failed"
                assert event.response.error is not None
                assert event.response.error.code == "server_error"
    assert kinds[-1] == "response.failed", kinds[-5:]
    assert "response.completed" not in kinds
    assert kinds.count("response.output_text.delta") < 150  # it broke off
    assert kinds[-2] == "response.output_item.done"  # the open message was closed first
    with gw.client() as client, pytest.raises(openai.NotFoundError):
        client.responses.retrieve(rid)  # a failed response is not stored


def test_cancel_ends_an_in_flight_response_and_its_engine_work(launch: Launcher) -> None:
    engine, gw = slow_gateway(launch)
    with gw.client(timeout_s=10.0) as client:
        stream = slow_stream(client)
        rid, deltas = "", 0
        with pytest.raises(openai.APIError):  # its connection is closed mid-stream
            for event in stream:
                if event.type == "response.created":
                    rid = event.response.id
                elif event.type == "response.output_text.delta":
                    deltas += 1
                    if deltas == 3:
                        assert engine.stats()["in_flight"] == 1
                        cancelled = client.responses.cancel(rid)
                        assert cancelled.status == "cancelled"
                        assert cancelled.output[0].status == "incomplete", cancelled.model_dump()[
                            "output"
                        ]
                        assert cancelled.output_text.startswith("word word")
        assert deltas < 150
        wait_until(lambda: engine.stats()["in_flight"] == 0, 5.0, "the engine call to end")
        assert client.responses.retrieve(rid).status == "cancelled"
        again = client.responses.cancel(rid)  # cancelling twice answers the same
        assert again.status == "cancelled"

        done = client.responses.create(model=SLOW, input="SIM_REPLY: ok")
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.cancel(done.id)
        assert info.value.code == "response_already_completed"
        with pytest.raises(openai.NotFoundError):
            client.responses.cancel("resp_unknown")
