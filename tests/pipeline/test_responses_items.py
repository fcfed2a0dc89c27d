"""Responses items: stored in OpenAI's listed shape with ids, and read back as chat history."""

from __future__ import annotations

import itertools
from typing import Any

from smg.pipeline.responses_items import input_messages, stored_items
from smg.pipeline.responses_request import parse_responses, with_history


def ids() -> Any:
    counter = itertools.count()
    return lambda prefix: f"{prefix}{next(counter)}"


def test_a_string_input_is_stored_as_one_user_message_with_a_text_part() -> None:
    assert stored_items("hi", ids()) == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}],
         "status": "completed", "id": "msg_0"},
    ]  # fmt: skip


def test_items_keep_the_clients_ids_and_get_ours_where_they_have_none() -> None:
    raw = [
        {"role": "assistant", "content": "Sure."},
        {"type": "function_call", "id": "fc_client", "call_id": "c1", "name": "f",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]  # fmt: skip
    got = stored_items(raw, ids())
    assert [i["id"] for i in got] == ["msg_0", "fc_client", "fco_1"]
    assert got[0]["content"] == [{"type": "output_text", "text": "Sure."}]
    assert raw[0]["content"] == "Sure."  # the client's items are not changed


def test_stored_items_read_back_as_the_same_chat_turns() -> None:
    raw: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Call it."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "5C"},
    ]
    assert input_messages(stored_items(raw, ids()), None) == input_messages(raw, None)


def test_history_comes_before_the_new_input_and_after_the_instructions() -> None:
    req = parse_responses({"model": "m", "input": "And now?", "instructions": "Be brief.",
                           "previous_response_id": "resp_1"})  # fmt: skip
    history = stored_items([{"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello."}], ids())  # fmt: skip
    assert with_history(req, history).messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "And now?"},
    )
