"""`--history-backend postgres` (`--postgres-db-url`): an asyncpg pool; the schema is migrated on
start under a transaction-scoped advisory lock, so nodes starting together migrate once. Shared by
every node pointing at the same database (a conversation continues through any of them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from smg.storage.contract import StorageError
from smg.storage.sql import Dialect, SqlStorage, migrate, numbered

DIALECT = Dialect(
    name="postgres",
    blob="BYTEA",
    sequence="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    numbered=True,
    errors=(asyncpg.PostgresError, asyncpg.InterfaceError, OSError),
    unique_violation=asyncpg.UniqueViolationError,
    row_lock=" FOR UPDATE",
)
MIGRATION_LOCK = 0x736D6753  # "smgS": the advisory lock key the migration holds


class _Conn:
    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self._conn.fetch(numbered(sql), *args)]

    async def run(self, sql: str, *args: Any) -> int:
        status: str = await self._conn.execute(numbered(sql), *args)
        last = status.rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0


class PostgresStorage(SqlStorage):
    def __init__(self, pool: asyncpg.Pool, timeout_s: float) -> None:
        self._pool = pool
        super().__init__(DIALECT, self._connection, self._transaction_on, timeout_s)

    @classmethod
    async def open(
        cls, url: str, *, timeout_s: float = 5.0, pool_max_size: int = 16
    ) -> PostgresStorage:
        """Connect and migrate. The URL (it may hold a password) never reaches an error."""
        try:
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=pool_max_size, timeout=timeout_s,
                command_timeout=timeout_s,
            )  # fmt: skip
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as e:
            raise StorageError(f"postgres connect failed: {type(e).__name__}") from None
        store = cls(pool, timeout_s)
        try:

            async def work() -> None:
                async with store._transaction_on() as tx:
                    await tx.run("SELECT pg_advisory_xact_lock(?)", MIGRATION_LOCK)
                    await migrate(tx, DIALECT)

            await store._call("migrate", work)
        except BaseException:
            pool.terminate()
            raise
        return store

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Conn]:
        async with self._pool.acquire() as conn:
            yield _Conn(conn)

    @contextlib.asynccontextmanager
    async def _transaction_on(self) -> AsyncIterator[_Conn]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield _Conn(conn)

    async def close(self) -> None:
        if not self._pool.is_closing():
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._pool.close()
            except Exception:
                self._pool.terminate()
