"""The memory backend's bound (smg/storage/memory.py): at most max_records records and max_bytes
of JSON; least recently used evicted first; a record larger than the bound refused, not lost."""

from __future__ import annotations

import pytest

from smg.storage import codec
from smg.storage.contract import Conversation, ListQuery, StorageError, StoredResponse
from smg.storage.memory import MemoryStorage


def _resp(rid: str, tenant: str = "t", pad: int = 0) -> StoredResponse:
    return StoredResponse(
        id=rid, tenant=tenant, created_at=0, status="completed", model="m",
        input_items=({"id": "i", "text": "x" * pad},),
    )  # fmt: skip


async def test_max_records_evicts_least_recently_used() -> None:
    store = MemoryStorage(max_records=3)
    for rid in ("a", "b", "c"):
        await store.put_response(_resp(rid))
    assert await store.get_response("t", "a") is not None  # a is now the most recent
    await store.put_response(_resp("d"))
    assert len(store) == 3
    assert await store.get_response("t", "b") is None
    for rid in ("a", "c", "d"):
        assert await store.get_response("t", rid) is not None


async def test_max_bytes_evicts_and_counts_exactly() -> None:
    size = len(codec.dump_response(_resp("a", pad=100)))
    store = MemoryStorage(max_bytes=size * 2 + size // 2)
    await store.put_response(_resp("a", pad=100))
    await store.put_response(_resp("b", pad=100))
    assert store.used_bytes == 2 * size
    await store.put_response(_resp("c", pad=100))
    assert store.used_bytes == 2 * size
    assert await store.get_response("t", "a") is None
    assert await store.delete_response("t", "b") is True
    assert store.used_bytes == size


async def test_replacing_a_record_does_not_double_count() -> None:
    store = MemoryStorage(max_records=1)
    await store.put_response(_resp("a", pad=10))
    await store.put_response(_resp("a", pad=20))
    assert len(store) == 1
    assert store.used_bytes == len(codec.dump_response(_resp("a", pad=20)))


async def test_a_record_over_the_bound_is_refused_and_nothing_is_evicted() -> None:
    store = MemoryStorage(max_bytes=300)
    await store.put_response(_resp("small"))
    with pytest.raises(StorageError, match="exceeds the memory backend's bound of 300 bytes"):
        await store.put_response(_resp("big", pad=400))
    with pytest.raises(StorageError):
        await store.put_response(_resp("small", pad=400))  # a replacement too big keeps the old
    assert await store.get_response("t", "small") == _resp("small")


async def test_conversation_items_count_toward_the_bound() -> None:
    store = MemoryStorage(max_bytes=600)
    await store.put_response(_resp("old"))
    await store.create_conversation(Conversation(id="c", tenant="t", created_at=0))
    before = store.used_bytes
    await store.add_items("t", "c", [{"id": "i1", "text": "y" * 200}])
    assert store.used_bytes > before
    # growing the conversation evicts the older response, never the conversation itself
    await store.add_items("t", "c", [{"id": "i2", "text": "y" * 200}])
    assert await store.get_response("t", "old") is None
    page = await store.list_items("t", "c", ListQuery(order="asc"))
    assert page is not None and [i["id"] for i in page.items] == ["i1", "i2"]
    with pytest.raises(StorageError):
        await store.add_items("t", "c", [{"id": "i3", "text": "y" * 400}])
    page = await store.list_items("t", "c", ListQuery(order="asc"))
    assert page is not None and [i["id"] for i in page.items] == ["i1", "i2"]
    used = store.used_bytes
    assert await store.delete_item("t", "c", "i1") is True
    assert store.used_bytes < used
    assert await store.delete_conversation("t", "c") is True
    assert store.used_bytes == 0 and len(store) == 0


async def test_update_metadata_keeps_the_byte_count() -> None:
    store = MemoryStorage()
    await store.create_conversation(Conversation(id="c", tenant="t", created_at=0))
    await store.update_conversation("t", "c", {"k": "v" * 50})
    conv = await store.get_conversation("t", "c")
    assert conv is not None
    assert store.used_bytes == len(codec.dump_conversation(conv))
    await store.update_conversation("t", "c", {})
    assert store.used_bytes == len(codec.dump_conversation(Conversation("c", "t", 0)))


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MemoryStorage(max_records=0)
    with pytest.raises(ValueError):
        MemoryStorage(max_bytes=0)
