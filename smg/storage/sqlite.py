"""`--history-backend sqlite` (`--sqlite-path`): one file, survives a restart of one node, nothing
to install. One aiosqlite connection (its own thread) in autocommit mode; an asyncio lock gives
each operation the connection alone, so transactions never interleave. WAL journal."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import aiosqlite

from smg.storage.contract import StorageError
from smg.storage.sql import Dialect, SqlStorage, migrate

DIALECT = Dialect(
    name="sqlite",
    blob="BLOB",
    sequence="INTEGER PRIMARY KEY AUTOINCREMENT",
    numbered=False,
    errors=(sqlite3.Error, OSError, ValueError),
    unique_violation=sqlite3.IntegrityError,
    row_lock="",  # BEGIN IMMEDIATE already makes each writer the only one
)


def _probe(path: str) -> None:
    sqlite3.connect(path).close()


class _Conn:
    __slots__ = ("_db",)

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        async with self._db.execute(sql, args) as cursor:
            return [tuple(r) for r in await cursor.fetchall()]

    async def run(self, sql: str, *args: Any) -> int:
        async with self._db.execute(sql, args) as cursor:
            return cursor.rowcount


class SqliteStorage(SqlStorage):
    def __init__(self, db: aiosqlite.Connection, timeout_s: float) -> None:
        self._db = db
        self._lock = asyncio.Lock()
        self._closed = False
        super().__init__(DIALECT, self._connection, self._transaction_on, timeout_s)

    @classmethod
    async def open(cls, path: str, *, timeout_s: float = 5.0) -> SqliteStorage:
        """Open (creating) the file and migrate its schema."""
        try:
            # Probe first: aiosqlite leaves its worker thread's stop unawaited when its own
            # connect fails (a warning at loop close), so it only opens a path known to open.
            async with asyncio.timeout(timeout_s):
                await asyncio.to_thread(_probe, path)
            db = await aiosqlite.connect(path, isolation_level=None, timeout=timeout_s)
        except (sqlite3.Error, OSError) as e:
            raise StorageError(f"sqlite open failed: {type(e).__name__}: {e}") from None
        store = cls(db, timeout_s)
        try:
            await store._call("journal", lambda: _Conn(db).rows("PRAGMA journal_mode=WAL"))

            async def work() -> None:
                async with store._transaction_on() as tx:
                    await migrate(tx, DIALECT)

            await store._call("migrate", work)
        except BaseException:
            await db.close()
            raise
        return store

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Conn]:
        async with self._lock:
            yield _Conn(self._db)

    @contextlib.asynccontextmanager
    async def _transaction_on(self) -> AsyncIterator[_Conn]:
        async with self._lock:
            conn = _Conn(self._db)
            await conn.run("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                await conn.run("ROLLBACK")
                raise
            await conn.run("COMMIT")

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._db.close()
