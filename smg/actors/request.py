"""Request actors: each in-flight request is addressable while it runs.

A request's body is the aiohttp handler task itself (a second task per request would double the
scheduling cost on the hot path); its mailbox is the control lane the gateway uses on it: `Cancel`
at the end of a drain. `InFlight` is the table the drain waits on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str


class RequestActor:
    """One in-flight request. `with inflight.track(rid):` registers it for the block's length (a
    plain context-manager object: no generator per request on the hot path)."""

    __slots__ = ("_table", "request_id", "started", "task")

    def __init__(self, table: InFlight, request_id: str) -> None:
        self._table = table
        self.request_id = request_id
        self.task: asyncio.Task[Any] | None = None
        self.started = 0.0

    def __enter__(self) -> RequestActor:
        self.task = asyncio.current_task()
        self.started = asyncio.get_running_loop().time()
        self._table._add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._table._remove(self)

    def tell(self, message: Cancel) -> None:
        match message:
            case Cancel():
                if self.task is not None and not self.task.done():
                    self.task.cancel(message.reason)


class InFlight:
    """The requests running now; the drain waits for this table to empty."""

    def __init__(self) -> None:
        self.requests: set[RequestActor] = set()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self.requests)

    def track(self, request_id: str) -> RequestActor:
        return RequestActor(self, request_id)

    def _add(self, actor: RequestActor) -> None:
        self.requests.add(actor)
        if len(self.requests) == 1:
            self._empty.clear()

    def _remove(self, actor: RequestActor) -> None:
        self.requests.discard(actor)
        if not self.requests:
            self._empty.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()

    def cancel_all(self, reason: str) -> int:
        actors = list(self.requests)
        for a in actors:
            a.tell(Cancel(reason))
        return len(actors)
