"""The backends the contract suite runs against. A `Backend`'s `setup(request)` prepares a fresh,
empty store for one test (a file, a database on the session's server) and yields `open`, which
makes a new backend instance on that same store: a restart, for the persistent ones."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg
import pytest

from smg.storage.contract import Storage
from smg.storage.memory import MemoryStorage
from smg.storage.postgres import PostgresStorage
from smg.storage.sqlite import SqliteStorage

Opener = Callable[[], Awaitable[Storage]]
Setup = Callable[[pytest.FixtureRequest], contextlib.AbstractAsyncContextManager[Opener]]


@dataclass(frozen=True)
class Backend:
    name: str
    persistent: bool
    setup: Setup
    open: Opener | None = None

    def __repr__(self) -> str:
        return self.name

    @contextlib.asynccontextmanager
    async def session(self, request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
        async with self.setup(request) as opener:
            yield replace(self, open=opener)


@contextlib.asynccontextmanager
async def _memory(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    async def opener() -> Storage:
        return MemoryStorage()

    yield opener


@contextlib.asynccontextmanager
async def _sqlite(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    path = Path(request.getfixturevalue("tmp_path")) / "history.db"

    async def opener() -> Storage:
        return await SqliteStorage.open(str(path))

    yield opener


_databases = itertools.count()


@contextlib.asynccontextmanager
async def _postgres(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    admin_url: str = request.getfixturevalue("postgres_url")
    name = f"t{next(_databases)}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    url = admin_url.rsplit("/", 1)[0] + "/" + name

    async def opener() -> Storage:
        return await PostgresStorage.open(url, pool_max_size=4)

    yield opener


BACKENDS = [
    pytest.param(Backend("memory", False, _memory), id="memory"),
    pytest.param(Backend("sqlite", True, _sqlite), id="sqlite"),
    pytest.param(
        Backend("postgres", True, _postgres), id="postgres", marks=pytest.mark.integration
    ),
]
PERSISTENT = [p for p in BACKENDS if p.values[0].persistent]  # type: ignore[union-attr]
