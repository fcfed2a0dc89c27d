"""The storage contract in SQL, once, for the sqlite and postgres backends.

A backend adapts its driver to `Sql` (rows / run / a transaction) and names its `Dialect`; the
schema, its versioned migrations and every query live here. Records are JSON bytes in one column;
conversation items are rows ordered by a per-database sequence, so pages are index range scans.
A response's input items live in its record (bounded by the request size) and are paged in
memory with `page_window`.

Concurrent writers (two gateways on one database) stay atomic per conversation: an append, a
metadata update and a delete first lock the conversation's row in their transaction (the
dialect's `row_lock`: `FOR UPDATE` on postgres; sqlite's `BEGIN IMMEDIATE` already serialises
every writer), so one append's items take consecutive sequence numbers, appends are ordered as
they commit, an update never writes over a conversation deleted meanwhile, and an append racing a
delete either lands before it (and is deleted with it) or finds the conversation gone.

Every public call runs under the backend's timeout; a driver error or a timeout becomes
`StorageError` naming the operation and the error's type only (never a URL, never contents).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from smg.storage import codec
from smg.storage.contract import (
    Conversation,
    Item,
    ListQuery,
    Page,
    StorageError,
    StoredResponse,
    input_items_page,
    item_ids,
)
from smg.storage.deadline import bounded

T = TypeVar("T")


class Sql(Protocol):
    """One connection (or a transaction on one). SQL uses `?` placeholders."""

    async def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]: ...

    async def run(self, sql: str, *args: Any) -> int:
        """Execute; the number of rows changed."""
        ...


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    blob: str  # the binary column type
    sequence: str  # an auto-incrementing primary key column definition
    numbered: bool  # placeholders are $1, $2, ... instead of ?
    errors: tuple[type[BaseException], ...]  # driver errors that mean "the backend failed"
    unique_violation: type[BaseException]
    row_lock: str  # appended to a SELECT to lock its rows to the end of the transaction


# Each migration is a list of statements; its index + 1 is the schema version it brings.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE smg_responses (tenant TEXT NOT NULL, id TEXT NOT NULL,"
        " record {blob} NOT NULL, PRIMARY KEY (tenant, id))",
        "CREATE TABLE smg_conversations (tenant TEXT NOT NULL, id TEXT NOT NULL,"
        " record {blob} NOT NULL, PRIMARY KEY (tenant, id))",
        "CREATE TABLE smg_conversation_items (seq {sequence}, tenant TEXT NOT NULL,"
        " conversation_id TEXT NOT NULL, item_id TEXT NOT NULL, item {blob} NOT NULL,"
        " UNIQUE (tenant, conversation_id, item_id))",
        "CREATE INDEX smg_conversation_items_order"
        " ON smg_conversation_items (tenant, conversation_id, seq)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


def numbered(sql: str) -> str:
    """`?` placeholders as `$1, $2, ...` (postgres)."""
    counter = iter(range(1, 1_000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


async def migrate(tx: Sql, dialect: Dialect) -> int:
    """Bring the schema to SCHEMA_VERSION inside the caller's transaction (which the caller
    serialises across nodes); returns the version found. A schema newer than this code is
    refused rather than written to."""
    await tx.run("CREATE TABLE IF NOT EXISTS smg_schema_version (version INTEGER NOT NULL)")
    found_rows = await tx.rows("SELECT version FROM smg_schema_version")
    found = int(found_rows[0][0]) if found_rows else 0
    if found > SCHEMA_VERSION:
        raise StorageError(
            f"the {dialect.name} schema is at version {found}, newer than this smg "
            f"({SCHEMA_VERSION}); upgrade smg"
        )
    for statements in MIGRATIONS[found:]:
        for statement in statements:
            await tx.run(statement.format(blob=dialect.blob, sequence=dialect.sequence))
    if not found_rows:
        await tx.run("INSERT INTO smg_schema_version (version) VALUES (?)", SCHEMA_VERSION)
    elif found < SCHEMA_VERSION:
        await tx.run("UPDATE smg_schema_version SET version = ?", SCHEMA_VERSION)
    return found


class SqlStorage:
    """The contract over `Sql`. `connect()` gives a connection for one statement or a read;
    `transaction()` one for an atomic group of statements."""

    def __init__(
        self,
        dialect: Dialect,
        connect: Callable[[], AbstractAsyncContextManager[Sql]],
        transaction: Callable[[], AbstractAsyncContextManager[Sql]],
        timeout_s: float,
    ) -> None:
        self._dialect = dialect
        self._connect = connect
        self._transaction = transaction
        self._timeout_s = timeout_s

    async def _call(self, op: str, work: Callable[[], Awaitable[T]]) -> T:
        d = self._dialect
        return await bounded(
            d.name, op, self._timeout_s, d.errors, work, conflicts=(d.unique_violation,)
        )

    # ---- responses
    async def put_response(self, record: StoredResponse) -> None:
        item_ids(record.input_items)
        data = codec.dump_response(record)

        async def work() -> None:
            async with self._transaction() as tx:
                await tx.run(
                    "DELETE FROM smg_responses WHERE tenant = ? AND id = ?",
                    record.tenant,
                    record.id,
                )
                await tx.run(
                    "INSERT INTO smg_responses (tenant, id, record) VALUES (?, ?, ?)",
                    record.tenant,
                    record.id,
                    data,
                )

        await self._call("put_response", work)

    async def _response_row(self, tenant: str, response_id: str) -> bytes | None:
        async with self._connect() as c:
            rows = await c.rows(
                "SELECT record FROM smg_responses WHERE tenant = ? AND id = ?", tenant, response_id
            )
        return bytes(rows[0][0]) if rows else None

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        data = await self._call("get_response", lambda: self._response_row(tenant, response_id))
        return None if data is None else codec.load_response(data)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        async def work() -> int:
            async with self._connect() as c:
                return await c.run(
                    "DELETE FROM smg_responses WHERE tenant = ? AND id = ?", tenant, response_id
                )

        return await self._call("delete_response", work) > 0

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
        data = codec.dump_conversation(conversation)
        t, cid = conversation.tenant, conversation.id

        async def work() -> None:
            async with self._transaction() as tx:  # the row first, as in a delete
                await tx.run("DELETE FROM smg_conversations WHERE tenant = ? AND id = ?", t, cid)
                await tx.run(
                    "DELETE FROM smg_conversation_items WHERE tenant = ? AND conversation_id = ?",
                    t,
                    cid,
                )
                await tx.run(
                    "INSERT INTO smg_conversations (tenant, id, record) VALUES (?, ?, ?)",
                    t,
                    cid,
                    data,
                )
                await _insert_items(tx, t, cid, ids, encoded)

        await self._call("create_conversation", work)
        return conversation

    async def _conversation_row(
        self, c: Sql, tenant: str, conversation_id: str, *, lock: bool = False
    ) -> bytes | None:
        """The conversation's record; `lock`: its row locked until the transaction ends."""
        rows = await c.rows(
            "SELECT record FROM smg_conversations WHERE tenant = ? AND id = ?"
            + (self._dialect.row_lock if lock else ""),
            tenant,
            conversation_id,
        )
        return bytes(rows[0][0]) if rows else None

    async def get_conversation(self, tenant: str, conversation_id: str) -> Conversation | None:
        async def work() -> bytes | None:
            async with self._connect() as c:
                return await self._conversation_row(c, tenant, conversation_id)

        data = await self._call("get_conversation", work)
        return None if data is None else codec.load_conversation(data)

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: Mapping[str, str]
    ) -> Conversation | None:
        async def work() -> Conversation | None:
            async with self._transaction() as tx:
                data = await self._conversation_row(tx, tenant, conversation_id, lock=True)
                if data is None:
                    return None
                updated = replace(codec.load_conversation(data), metadata=dict(metadata))
                await tx.run(
                    "UPDATE smg_conversations SET record = ? WHERE tenant = ? AND id = ?",
                    codec.dump_conversation(updated),
                    tenant,
                    conversation_id,
                )
                return updated

        return await self._call("update_conversation", work)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        async def work() -> int:
            async with self._transaction() as tx:  # the row first: a running append ends
                deleted = await tx.run(  # first, and its items are seen by the next statement
                    "DELETE FROM smg_conversations WHERE tenant = ? AND id = ?",
                    tenant,
                    conversation_id,
                )
                await tx.run(
                    "DELETE FROM smg_conversation_items WHERE tenant = ? AND conversation_id = ?",
                    tenant,
                    conversation_id,
                )
                return deleted

        return await self._call("delete_conversation", work) > 0

    async def add_items(self, tenant: str, conversation_id: str, items: Sequence[Item]) -> bool:
        ids = item_ids(items)
        encoded = [codec.dump(item) for item in items]

        async def work() -> bool:
            async with self._transaction() as tx:
                if await self._conversation_row(tx, tenant, conversation_id, lock=True) is None:
                    return False
                await _insert_items(tx, tenant, conversation_id, ids, encoded)
                return True

        return await self._call("add_items", work)

    async def list_items(self, tenant: str, conversation_id: str, query: ListQuery) -> Page | None:
        async def work() -> Page | None:
            async with self._connect() as c:
                if await self._conversation_row(c, tenant, conversation_id) is None:
                    return None
                return await _items_page(c, tenant, conversation_id, query)

        return await self._call("list_items", work)

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item | None:
        async def work() -> list[tuple[Any, ...]]:
            async with self._connect() as c:
                return await c.rows(
                    "SELECT item FROM smg_conversation_items"
                    " WHERE tenant = ? AND conversation_id = ? AND item_id = ?",
                    tenant,
                    conversation_id,
                    item_id,
                )

        rows = await self._call("get_item", work)
        return codec.load_item(bytes(rows[0][0])) if rows else None

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        async def work() -> int:
            async with self._connect() as c:
                return await c.run(
                    "DELETE FROM smg_conversation_items"
                    " WHERE tenant = ? AND conversation_id = ? AND item_id = ?",
                    tenant,
                    conversation_id,
                    item_id,
                )

        return await self._call("delete_item", work) > 0


async def _insert_items(
    tx: Sql, tenant: str, conversation_id: str, ids: list[str], encoded: list[bytes]
) -> None:
    for item_id, data in zip(ids, encoded, strict=True):
        await tx.run(
            "INSERT INTO smg_conversation_items (tenant, conversation_id, item_id, item)"
            " VALUES (?, ?, ?, ?)",
            tenant,
            conversation_id,
            item_id,
            data,
        )


async def _items_page(c: Sql, tenant: str, conversation_id: str, query: ListQuery) -> Page:
    where = "tenant = ? AND conversation_id = ?"
    args: list[Any] = [tenant, conversation_id]
    if query.after is not None:
        cursor = await c.rows(
            f"SELECT seq FROM smg_conversation_items WHERE {where} AND item_id = ?",
            *args,
            query.after,
        )
        if not cursor:
            return Page((), False)
        where += " AND seq > ?" if query.order == "asc" else " AND seq < ?"
        args.append(cursor[0][0])
    direction = "ASC" if query.order == "asc" else "DESC"
    rows = await c.rows(
        f"SELECT item FROM smg_conversation_items WHERE {where}"
        f" ORDER BY seq {direction} LIMIT {query.limit + 1}",
        *args,
    )
    items = tuple(codec.load_item(bytes(r[0])) for r in rows[: query.limit])
    return Page(items, len(rows) > query.limit)
