"""The backends the contract suite runs against. Each `Backend` opens a fresh store for a test
(`session`, an async context manager, sets up whatever the backend needs: a file, a database, a
server); `open()` makes a new backend instance on that same store (a restart, for the persistent
ones)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import pytest

from smg.storage.contract import Storage
from smg.storage.memory import MemoryStorage


@dataclass(frozen=True)
class Backend:
    name: str
    persistent: bool
    setup: Callable[
        [pytest.FixtureRequest],
        contextlib.AbstractAsyncContextManager[Callable[[], Awaitable[Storage]]],
    ]
    open: Callable[[], Awaitable[Storage]] | None = None

    def __repr__(self) -> str:
        return self.name

    @contextlib.asynccontextmanager
    async def session(self, request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
        async with self.setup(request) as opener:
            yield replace(self, open=opener)


@contextlib.asynccontextmanager
async def _memory(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[[], Awaitable[Storage]]]:
    async def opener() -> Storage:
        return MemoryStorage()

    yield opener


BACKENDS = [
    pytest.param(Backend("memory", False, _memory), id="memory"),
]
