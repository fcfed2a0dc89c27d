"""The redis backend beyond the contract (smg/storage/redis.py): retention as a TTL, keys that no
tenant/id pair can forge, and a silent or dead server giving StorageError within the timeout."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from smg.storage.contract import Conversation, StorageError, StoredResponse
from smg.storage.redis import DAY_S, RedisStorage

from .servers import blackhole, free_port

pytestmark = pytest.mark.integration


def _resp(rid: str, tenant: str) -> StoredResponse:
    return StoredResponse(id=rid, tenant=tenant, created_at=0, status="completed", model="m")


async def test_retention_is_a_ttl_and_minus_one_keeps(redis_url: str) -> None:
    raw = aioredis.Redis.from_url(redis_url)
    try:
        store = await RedisStorage.open(redis_url, retention_days=2, prefix="ttl:")
        await store.put_response(_resp("r", "t"))
        await store.create_conversation(Conversation("c", "t", 0), [{"id": "i"}])
        await store.add_items("t", "c", [{"id": "j"}])
        await store.close()
        for key in await raw.keys("ttl:*:1:t:*"):
            assert 2 * DAY_S - 60 < await raw.ttl(key) <= 2 * DAY_S, key
        keep = await RedisStorage.open(redis_url, retention_days=-1, prefix="keep:")
        await keep.put_response(_resp("r", "t"))
        await keep.close()
        assert await raw.ttl("keep:r:1:t:r") == -1
    finally:
        await raw.aclose()


async def test_a_metadata_update_renews_the_items_with_the_record(redis_url: str) -> None:
    """The record and its items expire together: an update refreshes all three keys' TTLs (a
    record renewed alone would outlive its items and come back with an empty history)."""
    raw = aioredis.Redis.from_url(redis_url)
    try:
        store = await RedisStorage.open(redis_url, retention_days=2, prefix="upd:")
        await store.create_conversation(Conversation("c", "t", 0), [{"id": "i"}])
        keys = await raw.keys("upd:c*:1:t:c")
        assert len(keys) == 3
        for key in keys:
            await raw.expire(key, 60)
        updated = await store.update_conversation("t", "c", {"k": "v"})
        await store.close()
        assert updated is not None and dict(updated.metadata) == {"k": "v"}
        for key in keys:
            assert 2 * DAY_S - 60 < await raw.ttl(key) <= 2 * DAY_S, key
    finally:
        await raw.aclose()


async def test_tenant_and_id_cannot_spell_another_key(redis_url: str) -> None:
    store = await RedisStorage.open(redis_url, prefix="forge:")
    try:
        await store.put_response(_resp("c", "a:b"))
        assert await store.get_response("a", "b:c") is None
        assert await store.get_response("a:b", "c") is not None
    finally:
        await store.close()


async def test_a_silent_server_times_out() -> None:
    with blackhole() as port:
        started = time.monotonic()
        with pytest.raises(StorageError, match="redis ping"):
            await RedisStorage.open(f"redis://:s3cret@127.0.0.1:{port}/0", timeout_s=0.3)
        assert time.monotonic() - started < 3.0


async def test_a_refused_connection_is_a_storage_error_without_the_password() -> None:
    with pytest.raises(StorageError) as caught:
        await RedisStorage.open(f"redis://:s3cret@127.0.0.1:{free_port()}/0", timeout_s=1.0)
    assert "s3cret" not in str(caught.value)
