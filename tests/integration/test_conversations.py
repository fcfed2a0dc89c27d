"""Conversations end to end with the `openai` SDK: the Conversations API over the gateway's
store, and a three-turn conversation through `client.responses.create(conversation=...)` against
a simulated Qwen3 engine (the reply is the text after `SIM_REPLY:`)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from support.responses_cases import QWEN_REPLY, WEATHER

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Launcher

MODEL = "Qwen3-8B-sim"


@pytest.fixture(scope="module")
def client(module_launch: Launcher) -> Iterator[openai.OpenAI]:
    engine = module_launch.engine(MODEL, "vllm", chunk_tokens=1)
    gw = module_launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir())
    with gw.client(timeout_s=20.0) as c:
        yield c


def test_the_conversations_api(client: openai.OpenAI) -> None:
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Hello"}],
        metadata={"topic": "demo"},
    )
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(conv.id).id == conv.id
    updated = client.conversations.update(conv.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}

    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "assistant", "content": "Hi!"},
            {"type": "message", "role": "user", "content": "Bye"},
        ],
    )
    assert len(added.data) == 2
    page = client.conversations.items.list(conv.id, order="asc", limit=2)
    assert [i.type for i in page.data] == ["message", "message"] and page.has_more
    every = list(client.conversations.items.list(conv.id, order="asc", limit=1))
    assert len(every) == 3  # the SDK's pager follows `after`
    first = every[0]
    assert first.type == "message" and first.content[0].text == "Hello"  # type: ignore[union-attr]
    assert client.conversations.items.retrieve(first.id, conversation_id=conv.id).id == first.id
    client.conversations.items.delete(first.id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(first.id, conversation_id=conv.id)

    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError) as info:
        client.conversations.retrieve(conv.id)
    assert info.value.code == "conversation_not_found"


def test_a_three_turn_conversation_through_responses(client: openai.OpenAI) -> None:
    conv = client.conversations.create()
    first = client.responses.create(
        model=MODEL,
        conversation=conv.id,
        input=f"SIM_REPLY: {QWEN_REPLY}",
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert first.conversation is not None and first.conversation.id == conv.id
    call = first.output[2]
    assert call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        conversation=conv.id,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "5C"},
            {"role": "user", "content": "SIM_REPLY: It is 5C in Oslo."},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert second.output_text == "It is 5C in Oslo."
    third = client.responses.create(
        model=MODEL,
        conversation={"id": conv.id},
        input="SIM_REPLY: Bye.",
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert third.output_text == "Bye."
    assert first.usage and second.usage and third.usage
    assert first.usage.input_tokens < second.usage.input_tokens < third.usage.input_tokens

    items = list(client.conversations.items.list(conv.id, order="asc"))
    kinds = [i.type for i in items]
    assert kinds == [
        "message",  # turn 1: input
        "reasoning", "message", "function_call",  # turn 1: output
        "function_call_output", "message",  # turn 2: input
        "message",  # turn 2: output
        "message", "message",  # turn 3: input, output
    ]  # fmt: skip
    assert len({i.id for i in items}) == len(items)


def test_a_conversation_that_does_not_exist(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL, conversation="conv_missing", input="hi")
    assert info.value.code == "conversation_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(
            model=MODEL, conversation="conv_x", previous_response_id="resp_y", input="hi"
        )
    assert bad.value.code == "mutually_exclusive_parameters"
