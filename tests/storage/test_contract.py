"""The storage contract (smg/storage/contract.py): the pure pagination against a model, then ONE
suite run against every backend that stores (the `store` fixture, tests/storage/backends.py):
round trips, tenants isolated, pagination, delete, conflicts, copies, restart survival."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from support.examples import examples

from smg.storage.contract import (
    MAX_PAGE_LIMIT,
    Conversation,
    ItemConflict,
    ListQuery,
    Storage,
    StorageError,
    StoredResponse,
    item_ids,
    page_window,
)
from smg.storage.postgres import PostgresStorage
from smg.storage.redis import RedisStorage

from .backends import BACKENDS, PERSISTENT, Backend
from .servers import postgres_server, redis_server


def _model_page(ids: list[str], q: ListQuery) -> tuple[list[str], bool]:
    walk = ids if q.order == "asc" else ids[::-1]
    if q.after is not None:
        if q.after not in walk:
            return [], False
        walk = walk[walk.index(q.after) + 1 :]
    return walk[: q.limit], len(walk) > q.limit


@hsettings(max_examples=examples(200))
@given(
    n=st.integers(0, 30),
    limit=st.integers(1, MAX_PAGE_LIMIT),
    order=st.sampled_from(["asc", "desc"]),
    after=st.one_of(st.none(), st.integers(-2, 32)),
)
def test_page_window_matches_the_model(n: int, limit: int, order: str, after: int | None) -> None:
    ids = [f"i{k}" for k in range(n)]
    q = ListQuery(after=None if after is None else f"i{after}", limit=limit, order=order)  # type: ignore[arg-type]
    positions, has_more = page_window(ids, q)
    assert ([ids[p] for p in positions], has_more) == _model_page(ids, q)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order")],
)
def test_list_query_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ListQuery(**kwargs)  # type: ignore[arg-type]


def test_item_ids_are_checked() -> None:
    assert item_ids([{"id": "a"}, {"id": "b"}]) == ["a", "b"]
    with pytest.raises(ValueError, match="string 'id'"):
        item_ids([{"type": "message"}])
    with pytest.raises(ValueError, match="string 'id'"):
        item_ids([{"id": ""}])
    with pytest.raises(ItemConflict):
        item_ids([{"id": "a"}, {"id": "a"}])


# ---------------------------------------------------------------- the suite, per backend


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    b: Backend = request.param
    async with b.session(request) as live:
        yield live


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Storage]:
    assert backend.open is not None
    s = await backend.open()
    try:
        yield s
    finally:
        await s.close()


def _msg(i: int, text: str = "hi") -> dict[str, object]:
    return {
        "id": f"msg_{i:03d}",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": f"{text} {i} ✓"}],
    }


def _response(rid: str = "resp_1", tenant: str = "t1", n_input: int = 3) -> StoredResponse:
    return StoredResponse(
        id=rid,
        tenant=tenant,
        created_at=1_700_000_000,
        status="completed",
        model="m",
        input_items=tuple(_msg(i) for i in range(n_input)),
        output_items=(
            {"id": "fc_1", "type": "function_call", "name": "f", "arguments": '{"a": 1}'},
            {"id": "msg_out", "type": "message", "role": "assistant", "content": []},
        ),
        previous_response_id="resp_0",
        conversation_id="conv_1",
        metadata={"k": "v"},
        usage={"input_tokens": 3, "output_tokens": 5, "output_tokens_details": {"x": 1}},
        body={"instructions": "be brief", "temperature": 0.5},
    )


async def test_response_round_trip_and_replace(store: Storage) -> None:
    record = _response()
    await store.put_response(record)
    assert await store.get_response("t1", "resp_1") == record
    done = StoredResponse(id="resp_1", tenant="t1", created_at=1, status="cancelled", model="m")
    await store.put_response(done)
    assert await store.get_response("t1", "resp_1") == done
    assert await store.get_response("t1", "resp_nope") is None


async def test_response_delete(store: Storage) -> None:
    await store.put_response(_response())
    assert await store.delete_response("t1", "resp_1") is True
    assert await store.get_response("t1", "resp_1") is None
    assert await store.delete_response("t1", "resp_1") is False
    assert await store.list_input_items("t1", "resp_1", ListQuery()) is None


async def test_got_records_are_copies(store: Storage) -> None:
    await store.put_response(_response())
    got = await store.get_response("t1", "resp_1")
    assert got is not None
    got.input_items[0]["content"] = "changed"
    assert await store.get_response("t1", "resp_1") == _response()


async def test_tenants_are_isolated(store: Storage) -> None:
    await store.put_response(_response(tenant="t1"))
    conv = Conversation(id="conv_1", tenant="t1", created_at=5, metadata={"a": "1"})
    await store.create_conversation(conv, [_msg(1)])
    assert await store.get_response("t2", "resp_1") is None
    assert await store.list_input_items("t2", "resp_1", ListQuery()) is None
    assert await store.delete_response("t2", "resp_1") is False
    assert await store.get_conversation("t2", "conv_1") is None
    assert await store.update_conversation("t2", "conv_1", {"b": "2"}) is None
    assert await store.add_items("t2", "conv_1", [_msg(2)]) is False
    assert await store.list_items("t2", "conv_1", ListQuery()) is None
    assert await store.get_item("t2", "conv_1", "msg_001") is None
    assert await store.delete_item("t2", "conv_1", "msg_001") is False
    assert await store.delete_conversation("t2", "conv_1") is False
    # the owner still sees everything, unchanged
    assert await store.get_response("t1", "resp_1") == _response()
    assert await store.get_conversation("t1", "conv_1") == conv
    page = await store.list_items("t1", "conv_1", ListQuery())
    assert page is not None and [i["id"] for i in page.items] == ["msg_001"]
    # the same ids under another tenant are a separate record
    await store.put_response(_response(tenant="t2", n_input=1))
    assert (await store.get_response("t1", "resp_1")) == _response()


QUERIES = [
    ListQuery(),
    ListQuery(order="asc"),
    ListQuery(limit=1),
    ListQuery(limit=4, order="asc"),
    ListQuery(after="msg_003", limit=2, order="asc"),
    ListQuery(after="msg_003", limit=2, order="desc"),
    ListQuery(after="msg_006", order="asc"),
    ListQuery(after="msg_000", order="desc"),
    ListQuery(after="msg_missing"),
    ListQuery(limit=MAX_PAGE_LIMIT),
]


async def test_input_items_pages(store: Storage) -> None:
    await store.put_response(_response(n_input=7))
    ids = [f"msg_{i:03d}" for i in range(7)]
    for q in QUERIES:
        page = await store.list_input_items("t1", "resp_1", q)
        assert page is not None
        assert ([i["id"] for i in page.items], page.has_more) == _model_page(ids, q), q
    page = await store.list_input_items("t1", "resp_1", ListQuery(limit=1, order="asc"))
    assert page is not None and page.items == (_msg(0),)


async def test_conversation_lifecycle(store: Storage) -> None:
    conv = Conversation(id="conv_1", tenant="t1", created_at=5, metadata={"topic": "x"})
    assert await store.create_conversation(conv, [_msg(0), _msg(1)]) == conv
    assert await store.get_conversation("t1", "conv_1") == conv
    updated = await store.update_conversation("t1", "conv_1", {"topic": "y", "n": "2"})
    assert updated is not None
    assert (updated.id, updated.tenant, updated.created_at) == ("conv_1", "t1", 5)
    assert dict(updated.metadata) == {"topic": "y", "n": "2"}
    assert await store.get_conversation("t1", "conv_1") == updated
    assert await store.update_conversation("t1", "conv_nope", {}) is None

    assert await store.add_items("t1", "conv_1", [_msg(i) for i in range(2, 7)]) is True
    assert await store.add_items("t1", "conv_nope", [_msg(9)]) is False
    ids = [f"msg_{i:03d}" for i in range(7)]
    for q in QUERIES:
        page = await store.list_items("t1", "conv_1", q)
        assert page is not None
        assert ([i["id"] for i in page.items], page.has_more) == _model_page(ids, q), q
    assert await store.get_item("t1", "conv_1", "msg_004") == _msg(4)
    assert await store.get_item("t1", "conv_1", "msg_nope") is None

    assert await store.delete_item("t1", "conv_1", "msg_004") is True
    assert await store.delete_item("t1", "conv_1", "msg_004") is False
    assert await store.get_item("t1", "conv_1", "msg_004") is None
    page = await store.list_items("t1", "conv_1", ListQuery(order="asc"))
    assert page is not None
    assert [i["id"] for i in page.items] == [x for x in ids if x != "msg_004"]

    assert await store.delete_conversation("t1", "conv_1") is True
    assert await store.get_conversation("t1", "conv_1") is None
    assert await store.list_items("t1", "conv_1", ListQuery()) is None
    assert await store.get_item("t1", "conv_1", "msg_000") is None
    assert await store.delete_conversation("t1", "conv_1") is False
    # a new conversation under the same id starts empty
    await store.create_conversation(conv)
    page = await store.list_items("t1", "conv_1", ListQuery())
    assert page is not None and page.items == () and not page.has_more


async def test_item_conflicts_add_nothing(store: Storage) -> None:
    conv = Conversation(id="conv_1", tenant="t1", created_at=5)
    await store.create_conversation(conv, [_msg(0)])
    with pytest.raises(ItemConflict):
        await store.add_items("t1", "conv_1", [_msg(1), _msg(0)])
    with pytest.raises(ItemConflict):
        await store.add_items("t1", "conv_1", [_msg(2), _msg(2)])
    page = await store.list_items("t1", "conv_1", ListQuery(order="asc"))
    assert page is not None and [i["id"] for i in page.items] == ["msg_000"]
    # the same item id in another conversation is fine
    await store.create_conversation(Conversation(id="conv_2", tenant="t1", created_at=6), [_msg(0)])
    assert await store.get_item("t1", "conv_2", "msg_000") == _msg(0)


async def test_bad_items_are_refused(store: Storage) -> None:
    with pytest.raises(ValueError):
        await store.put_response(
            StoredResponse(
                id="r", tenant="t", created_at=0, status="completed", model="m",
                input_items=({"type": "message"},),
            )
        )  # fmt: skip
    await store.create_conversation(Conversation(id="c", tenant="t", created_at=0))
    with pytest.raises(ValueError):
        await store.add_items("t", "c", [{"id": "x", "bad": object()}])
    page = await store.list_items("t", "c", ListQuery())
    assert page is not None and page.items == ()


@pytest.fixture(params=PERSISTENT)
async def persistent(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    b: Backend = request.param
    async with b.session(request) as live:
        yield live


async def test_a_new_instance_on_the_same_store_sees_the_records(persistent: Backend) -> None:
    """Restart survival: close the backend, open a new one on the same file/database/server."""
    assert persistent.open is not None
    first = await persistent.open()
    try:
        await first.put_response(_response())
        conv = Conversation(id="conv_1", tenant="t1", created_at=5, metadata={"a": "b"})
        await first.create_conversation(conv, [_msg(0), _msg(1)])
    finally:
        await first.close()
    second = await persistent.open()
    try:
        assert await second.get_response("t1", "resp_1") == _response()
        assert await second.get_conversation("t1", "conv_1") == conv
        assert await second.add_items("t1", "conv_1", [_msg(2)]) is True
        page = await second.list_items("t1", "conv_1", ListQuery(order="asc"))
        assert page is not None and page.items == (_msg(0), _msg(1), _msg(2))
    finally:
        await second.close()


async def test_concurrent_writers_lose_nothing(store: Storage) -> None:
    """Many coroutines adding to one conversation and putting responses at once: every write
    lands, each item exactly once."""
    await store.create_conversation(Conversation(id="conv_1", tenant="t1", created_at=0))
    await asyncio.gather(
        *(store.add_items("t1", "conv_1", [_msg(i)]) for i in range(40)),
        *(store.put_response(_response(rid=f"resp_{i}", n_input=1)) for i in range(20)),
    )
    page = await store.list_items("t1", "conv_1", ListQuery(limit=MAX_PAGE_LIMIT, order="asc"))
    assert page is not None and not page.has_more
    assert sorted(i["id"] for i in page.items) == [f"msg_{i:03d}" for i in range(40)]
    for i in range(20):
        assert await store.get_response("t1", f"resp_{i}") is not None


async def _all_items(store: Storage, conversation_id: str) -> list[str]:
    page = await store.list_items(
        "t1", conversation_id, ListQuery(limit=MAX_PAGE_LIMIT, order="asc")
    )
    assert page is not None and not page.has_more
    return [i["id"] for i in page.items]


@pytest.fixture
async def two_nodes(backend: Backend) -> AsyncIterator[tuple[Storage, Storage]]:
    """Two backend instances on one store, as two gateways share it (the memory backend is not
    shared: one instance twice)."""
    assert backend.open is not None
    first = await backend.open()
    second = await backend.open() if backend.persistent else first
    try:
        yield first, second
    finally:
        await first.close()
        if second is not first:
            await second.close()


async def test_concurrent_appends_through_two_instances_keep_every_batch_whole(
    two_nodes: tuple[Storage, Storage],
) -> None:
    """Two gateways appending to one conversation at once (two backend instances on one store;
    one instance for the memory backend, which is not shared): 20 appends of 5 items each all
    land, each append's items together and in their order, and both instances read the same
    order; metadata updates running among them neither clobber an append nor get lost."""
    first, second = two_nodes
    conv = Conversation(id="conv_1", tenant="t1", created_at=5, metadata={"n": "start"})
    await first.create_conversation(conv)
    batches = [[_msg(b * 5 + k, f"batch {b}") for k in range(5)] for b in range(20)]
    stores = (first, second)
    added = await asyncio.gather(
        *(stores[b % 2].add_items("t1", "conv_1", batch) for b, batch in enumerate(batches)),
        *(stores[u % 2].update_conversation("t1", "conv_1", {"n": str(u)}) for u in range(6)),
    )
    assert added[:20] == [True] * 20
    assert all(u is not None for u in added[20:])
    order = await _all_items(first, "conv_1")
    assert order == await _all_items(second, "conv_1")
    assert sorted(order) == [f"msg_{i:03d}" for i in range(100)]
    runs = [order[k : k + 5] for k in range(0, 100, 5)]
    assert sorted(runs) == [[i["id"] for i in batch] for batch in batches]
    got = await second.get_conversation("t1", "conv_1")
    assert got is not None and got.created_at == 5
    assert got.metadata["n"] in {str(u) for u in range(6)}


async def test_appends_racing_a_delete_leave_no_orphan_items(
    two_nodes: tuple[Storage, Storage],
) -> None:
    """A conversation deleted through one instance while another appends to it: every append
    lands before the delete (and goes with it) or finds the conversation gone; no item is left
    behind, and a new conversation under the same id starts empty."""
    first, second = two_nodes
    conv = Conversation(id="conv_1", tenant="t1", created_at=5)
    await first.create_conversation(conv)
    appends = [second.add_items("t1", "conv_1", [_msg(b * 2), _msg(b * 2 + 1)]) for b in range(10)]
    results = await asyncio.gather(
        *appends[:5], first.delete_conversation("t1", "conv_1"), *appends[5:]
    )
    assert results[5] is True
    for i in range(20):
        assert await first.get_item("t1", "conv_1", f"msg_{i:03d}") is None
    assert await second.list_items("t1", "conv_1", ListQuery()) is None
    await second.create_conversation(conv)
    assert await _all_items(first, "conv_1") == []


@pytest.mark.integration
@pytest.mark.parametrize(
    ("server", "opener"),
    [
        (postgres_server, lambda url: PostgresStorage.open(url, timeout_s=1.0)),
        (redis_server, lambda url: RedisStorage.open(url, timeout_s=1.0)),
    ],
    ids=["postgres", "redis"],
)
async def test_a_server_that_dies_gives_storage_errors_within_the_timeout(
    server: Callable[[], AbstractContextManager[str]],
    opener: Callable[[str], Awaitable[Storage]],
) -> None:
    with server() as url:
        store = await opener(url)
        await store.put_response(_response())
    try:
        started = time.monotonic()
        with pytest.raises(StorageError):
            await store.get_response("t1", "resp_1")
        with pytest.raises(StorageError):
            await store.add_items("t1", "conv_1", [_msg(0)])
        assert time.monotonic() - started < 5.0
    finally:
        await store.close()
