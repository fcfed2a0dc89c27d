"""`--history-backend redis` (`--redis-url`, `--redis-retention-days`): records as JSON strings
with a TTL (retention; -1 keeps them), shared by every node on the same server.

Keys (prefix `smg:`; the tenant is length-prefixed so no tenant/id pair can spell another's key):
`r:<t>:<id>` a response; `c:<t>:<id>` a conversation; `ci:<t>:<id>` its item order (a sorted set
scored by a global sequence); `cd:<t>:<id>` its items (a hash item id → JSON). Adding items is one
Lua script (existence, conflicts and the writes atomically, so appends from many nodes at once
never interleave or lose items); a metadata update is a WATCH/MULTI transaction. Every call runs
under the timeout and a redis or socket error becomes StorageError naming the operation only
(never the URL).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from smg.storage import codec
from smg.storage.contract import (
    Conversation,
    Item,
    ItemConflict,
    ListQuery,
    Page,
    StorageError,
    StoredResponse,
    input_items_page,
    item_ids,
)
from smg.storage.deadline import bounded

T = TypeVar("T")
DAY_S = 86_400
_WATCH_TRIES = 16  # optimistic update attempts before giving up (each lost one saw a write)

_ADD_ITEMS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 1 then return -1 end
end
for i = 2, #ARGV, 2 do
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
if tonumber(ARGV[1]) > 0 then
  for k = 1, 3 do redis.call('EXPIRE', KEYS[k], ARGV[1]) end
end
return 1
"""


class RedisStorage:
    def __init__(
        self, client: aioredis.Redis, *, retention_days: int, timeout_s: float, prefix: str
    ) -> None:
        self._r = client
        self._ttl_s = retention_days * DAY_S if retention_days > 0 else 0
        self._timeout_s = timeout_s
        self._prefix = prefix
        self._add = client.register_script(_ADD_ITEMS)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        retention_days: int = 30,
        timeout_s: float = 5.0,
        pool_max_size: int = 16,
        prefix: str = "smg:",
    ) -> RedisStorage:
        """Connect and check the server answers. The URL never reaches an error."""
        try:
            client = aioredis.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                max_connections=pool_max_size,
            )  # fmt: skip
        except (ValueError, RedisError) as e:
            raise StorageError(f"redis URL is not valid: {type(e).__name__}") from None
        store = cls(client, retention_days=retention_days, timeout_s=timeout_s, prefix=prefix)
        try:
            await store._call("ping", client.ping)
        except BaseException:
            await client.aclose()
            raise
        return store

    def _key(self, kind: str, tenant: str, record_id: str) -> str:
        return f"{self._prefix}{kind}:{len(tenant)}:{tenant}:{record_id}"

    def _conv_keys(self, tenant: str, cid: str) -> tuple[str, str, str]:
        return (
            self._key("c", tenant, cid),
            self._key("ci", tenant, cid),
            self._key("cd", tenant, cid),
        )

    async def _call(self, op: str, work: Callable[[], Awaitable[T]]) -> T:
        return await bounded("redis", op, self._timeout_s, (RedisError, OSError), work)

    def _ex(self) -> int | None:
        return self._ttl_s or None

    # ---- responses
    async def put_response(self, record: StoredResponse) -> None:
        item_ids(record.input_items)
        data = codec.dump_response(record)
        key = self._key("r", record.tenant, record.id)
        await self._call("put_response", lambda: self._r.set(key, data, ex=self._ex()))

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = self._key("r", tenant, response_id)
        data = await self._call("get_response", lambda: self._r.get(key))
        return None if data is None else codec.load_response(data)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        key = self._key("r", tenant, response_id)
        return bool(await self._call("delete_response", lambda: self._r.delete(key)))

    async def list_input_items(
        self, tenant: str, response_id: str, query: ListQuery
    ) -> Page | None:
        return input_items_page(await self.get_response(tenant, response_id), query)

    # ---- conversations
    async def create_conversation(
        self, conversation: Conversation, items: Sequence[Item] = ()
    ) -> Conversation:
        ids = item_ids(items)
        encoded = [codec.dump(item) for item in items]
        ck, ok, dk = self._conv_keys(conversation.tenant, conversation.id)
        data = codec.dump_conversation(conversation)

        async def work() -> None:
            top = await self._r.incrby(self._prefix + "seq", len(ids)) if ids else 0
            async with self._r.pipeline(transaction=True) as p:
                p.delete(ck, ok, dk)
                p.set(ck, data, ex=self._ex())
                if ids:
                    first = top - len(ids) + 1
                    p.zadd(ok, {i: first + n for n, i in enumerate(ids)})
                    p.hset(dk, mapping=dict(zip(ids, encoded, strict=True)))
                    if self._ttl_s:
                        p.expire(ok, self._ttl_s)
                        p.expire(dk, self._ttl_s)
                await p.execute()

        await self._call("create_conversation", work)
        return conversation

    async def get_conversation(self, tenant: str, conversation_id: str) -> Conversation | None:
        key = self._key("c", tenant, conversation_id)
        data = await self._call("get_conversation", lambda: self._r.get(key))
        return None if data is None else codec.load_conversation(data)

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: Mapping[str, str]
    ) -> Conversation | None:
        """Read, change and write the record under WATCH (a delete or a re-create meanwhile
        makes the write fail and the update start again); the items' TTLs are renewed with it,
        so a conversation never outlives its items."""
        ck, ok, dk = self._conv_keys(tenant, conversation_id)

        async def work() -> Conversation | None:
            async with self._r.pipeline(transaction=True) as p:
                for _ in range(_WATCH_TRIES):
                    await p.watch(ck)
                    data = await p.get(ck)
                    if data is None:
                        return None
                    updated = replace(codec.load_conversation(data), metadata=dict(metadata))
                    p.multi()
                    data = codec.dump_conversation(updated)
                    p.set(ck, data, ex=self._ex(), keepttl=not self._ttl_s)
                    if self._ttl_s:
                        p.expire(ok, self._ttl_s)
                        p.expire(dk, self._ttl_s)
                    try:
                        await p.execute()
                    except WatchError:
                        continue
                    return updated
            raise StorageError("redis update_conversation: the conversation kept changing")

        return await self._call("update_conversation", work)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        ck, ok, dk = self._conv_keys(tenant, conversation_id)

        async def work() -> list[Any]:
            async with self._r.pipeline(transaction=True) as p:
                p.delete(ck)
                p.delete(ok, dk)
                return list(await p.execute())

        return bool((await self._call("delete_conversation", work))[0])

    async def add_items(self, tenant: str, conversation_id: str, items: Sequence[Item]) -> bool:
        ids = item_ids(items)
        args: list[Any] = [self._ttl_s]
        for item_id, item in zip(ids, items, strict=True):
            args += [item_id, codec.dump(item)]
        keys = [*self._conv_keys(tenant, conversation_id), self._prefix + "seq"]
        result = await self._call("add_items", lambda: self._add(keys=keys, args=args))
        if result == -1:
            raise ItemConflict("an item id is already in the conversation")
        return bool(result)

    async def list_items(self, tenant: str, conversation_id: str, query: ListQuery) -> Page | None:
        ck, ok, dk = self._conv_keys(tenant, conversation_id)

        async def work() -> Page | None:
            if not await self._r.exists(ck):
                return None
            lo: float | str = "-inf"
            hi: float | str = "+inf"
            if query.after is not None:
                score = await self._r.zscore(ok, query.after)
                if score is None:
                    return Page((), False)
                if query.order == "asc":
                    lo = f"({score}"
                else:
                    hi = f"({score}"
            n = query.limit + 1
            if query.order == "asc":
                ids = await self._r.zrangebyscore(ok, lo, hi, start=0, num=n)
            else:
                ids = await self._r.zrevrangebyscore(ok, hi, lo, start=0, num=n)
            page_ids = ids[: query.limit]
            blobs: list[bytes | None] = []
            if page_ids:
                blobs = await cast("Awaitable[list[bytes | None]]", self._r.hmget(dk, page_ids))
            items = tuple(codec.load_item(b) for b in blobs if b is not None)
            return Page(items, len(ids) > query.limit)

        return await self._call("list_items", work)

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item | None:
        dk = self._key("cd", tenant, conversation_id)
        data = await self._call(
            "get_item", lambda: cast("Awaitable[bytes | None]", self._r.hget(dk, item_id))
        )
        return None if data is None else codec.load_item(data)

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        _, ok, dk = self._conv_keys(tenant, conversation_id)

        async def work() -> list[Any]:
            async with self._r.pipeline(transaction=True) as p:
                p.zrem(ok, item_id)
                p.hdel(dk, item_id)
                return list(await p.execute())

        return bool((await self._call("delete_item", work))[1])

    async def close(self) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._r.aclose()
        except (TimeoutError, RedisError, OSError):
            pass
