"""Request actors: each in-flight request is addressable while it runs.

A request's body is the aiohttp handler task itself (a second task per request would double the
scheduling cost on the hot path); its mailbox is the control lane the gateway uses on it: `Cancel`
at the end of a drain. `InFlight` is the table the drain waits on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str


class RequestActor:
    __slots__ = ("request_id", "started", "task")

    def __init__(self, request_id: str, task: asyncio.Task[Any] | None, started: float) -> None:
        self.request_id = request_id
        self.task = task
        self.started = started

    def tell(self, message: Cancel) -> None:
        match message:
            case Cancel():
                if self.task is not None and not self.task.done():
                    self.task.cancel(message.reason)


class InFlight:
    """The requests running now; the drain waits for this table to empty."""

    def __init__(self) -> None:
        self.requests: dict[int, RequestActor] = {}
        self._empty = asyncio.Event()
        self._empty.set()
        self._seq = 0

    def __len__(self) -> int:
        return len(self.requests)

    @contextmanager
    def track(self, request_id: str) -> Iterator[RequestActor]:
        loop = asyncio.get_running_loop()
        self._seq += 1
        key = self._seq
        actor = RequestActor(request_id, asyncio.current_task(), loop.time())
        self.requests[key] = actor
        self._empty.clear()
        try:
            yield actor
        finally:
            del self.requests[key]
            if not self.requests:
                self._empty.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()

    def cancel_all(self, reason: str) -> int:
        actors = list(self.requests.values())
        for a in actors:
            a.tell(Cancel(reason))
        return len(actors)
