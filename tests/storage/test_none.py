"""`--history-backend none` (smg/storage/none.py): writes are accepted and dropped, reads find
nothing, bad items are still refused (the caller's bug shows with every backend)."""

from __future__ import annotations

import pytest

from smg.storage.contract import Conversation, ListQuery, StoredResponse
from smg.storage.none import NoneStorage


async def test_stores_nothing() -> None:
    store = NoneStorage()
    record = StoredResponse(
        id="r", tenant="t", created_at=0, status="completed", model="m",
        input_items=({"id": "i"},),
    )  # fmt: skip
    await store.put_response(record)
    assert await store.get_response("t", "r") is None
    assert await store.delete_response("t", "r") is False
    assert await store.list_input_items("t", "r", ListQuery()) is None
    conv = Conversation(id="c", tenant="t", created_at=0)
    assert await store.create_conversation(conv, [{"id": "i"}]) == conv
    assert await store.get_conversation("t", "c") is None
    assert await store.update_conversation("t", "c", {"a": "b"}) is None
    assert await store.add_items("t", "c", [{"id": "j"}]) is False
    assert await store.list_items("t", "c", ListQuery()) is None
    assert await store.get_item("t", "c", "i") is None
    assert await store.delete_item("t", "c", "i") is False
    assert await store.delete_conversation("t", "c") is False
    await store.close()


async def test_bad_items_are_refused() -> None:
    store = NoneStorage()
    with pytest.raises(ValueError):
        await store.create_conversation(Conversation(id="c", tenant="t", created_at=0), [{}])
    with pytest.raises(ValueError):
        await store.put_response(
            StoredResponse(
                id="r", tenant="t", created_at=0, status="x", model="m", input_items=({},)
            )
        )
