"""The memory backend's Rust-gateway bounds (--history-memory-*), on a fake clock: at most
`max_responses` responses (oldest stored first, running background responses skipped), at most
`max_items` conversation items (oldest added first, out of their conversation), and retention by
age (responses since stored, conversations since last used), all checked on every write."""

from __future__ import annotations

import pytest

from smg.config import ConfigError, StorageConfig, check_storage
from smg.storage.contract import Conversation, ListQuery, StoredResponse
from smg.storage.factory import open_storage
from smg.storage.memory import MemoryStorage


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def resp(rid: str, status: str = "completed") -> StoredResponse:
    return StoredResponse(id=rid, tenant="t", created_at=0, status=status, model="m")


def conv(cid: str) -> Conversation:
    return Conversation(id=cid, tenant="t", created_at=0)


def item(iid: str) -> dict[str, str]:
    return {"id": iid, "type": "message", "role": "user", "content": iid}


async def ids_of(store: MemoryStorage, cid: str) -> list[str] | None:
    page = await store.list_items("t", cid, ListQuery(limit=100, order="asc"))
    return None if page is None else [i["id"] for i in page.items]


async def test_the_oldest_stored_responses_go_first_past_the_count() -> None:
    store = MemoryStorage(max_responses=2, now=Clock())
    for rid in ("a", "b"):
        await store.put_response(resp(rid))
    assert await store.get_response("t", "a") is not None  # a read is no reprieve
    await store.put_response(resp("c"))
    assert await store.get_response("t", "a") is None
    assert [await store.get_response("t", r) is not None for r in ("b", "c")] == [True, True]
    await store.put_response(resp("b"))  # stored again: now the newest
    await store.put_response(resp("d"))
    assert await store.get_response("t", "c") is None
    assert await store.get_response("t", "b") is not None


async def test_a_running_background_response_is_not_dropped_by_the_count() -> None:
    store = MemoryStorage(max_responses=2, now=Clock())
    await store.put_response(resp("bg", status="in_progress"))
    await store.put_response(resp("a"))
    await store.put_response(resp("b"))
    assert await store.get_response("t", "bg") is not None
    assert await store.get_response("t", "a") is None
    await store.put_response(resp("bg", status="completed"))  # done: an ordinary record now
    await store.put_response(resp("c"))
    assert await store.get_response("t", "b") is None
    assert await store.get_response("t", "bg") is not None  # it was stored last but one


async def test_the_oldest_items_go_first_out_of_their_conversation() -> None:
    store = MemoryStorage(max_items=3, now=Clock())
    await store.create_conversation(conv("x"), [item("x1"), item("x2")])
    await store.create_conversation(conv("y"), [item("y1")])
    before = store.used_bytes
    assert await store.add_items("t", "y", [item("y2")])
    assert await ids_of(store, "x") == ["x2"] and await ids_of(store, "y") == ["y1", "y2"]
    assert await store.get_item("t", "x", "x1") is None
    assert await store.add_items("t", "x", [item("x3"), item("x4")])
    assert await ids_of(store, "x") == ["x3", "x4"] and await ids_of(store, "y") == ["y2"]
    assert await store.delete_item("t", "y", "y2")
    assert await store.add_items("t", "y", [item("y5")])  # a deleted item frees its place
    assert await ids_of(store, "x") == ["x3", "x4"]
    assert store.used_bytes < before + 200  # the dropped items' bytes are given back
    assert await store.delete_conversation("t", "x")
    assert await store.add_items("t", "y", [item("y6"), item("y7")])
    assert await ids_of(store, "y") == ["y5", "y6", "y7"]


async def test_retention_drops_responses_by_age_and_conversations_by_last_use() -> None:
    clock = Clock()
    store = MemoryStorage(retention_s=100.0, now=clock)
    await store.put_response(resp("old"))
    await store.create_conversation(conv("idle"))
    await store.create_conversation(conv("busy"))
    clock.t += 60
    await store.put_response(resp("new"))
    assert await store.get_conversation("t", "busy") is not None  # a read is a use
    clock.t += 50  # old: 110 s since stored; idle: unused 110 s; busy: used 50 s ago
    assert await store.get_response("t", "old") is not None  # nothing checked until a write
    await store.put_response(resp("trigger"))
    assert await store.get_response("t", "old") is None
    assert await store.get_conversation("t", "idle") is None
    assert await store.get_conversation("t", "busy") is not None
    assert await store.get_response("t", "new") is not None
    clock.t += 1000
    await store.put_response(resp("last"))
    assert len(store) == 1 and await store.get_response("t", "last") is not None


async def test_no_retention_keeps_records_until_a_count_drops_them() -> None:
    clock = Clock()
    store = MemoryStorage(retention_s=0.0, now=clock)
    await store.put_response(resp("a"))
    clock.t += 10**9
    await store.put_response(resp("b"))
    assert await store.get_response("t", "a") is not None


@pytest.mark.parametrize("bad", [{"max_responses": 0}, {"max_items": 0}, {"retention_s": -1.0}])
def test_bounds_must_be_positive(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MemoryStorage(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"history_memory_max_responses": 0}, "--history-memory-max-responses must be >= 1"),
        ({"history_memory_max_items": 0}, "--history-memory-max-items must be >= 1"),
        ({"history_memory_retention_secs": -1}, "--history-memory-retention-secs must be >= 0"),
    ],
)
def test_the_flags_are_checked_at_start(changes: dict[str, float], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        check_storage(StorageConfig(**changes))  # type: ignore[arg-type]


async def test_the_flags_reach_the_memory_backend() -> None:
    cfg = StorageConfig(
        history_memory_max_responses=7,
        history_memory_max_items=8,
        history_memory_retention_secs=9,
    )
    store = await open_storage(cfg)
    assert isinstance(store, MemoryStorage)
    assert (store.max_responses, store.max_items, store.retention_s) == (7, 8, 9)
