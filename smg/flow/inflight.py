"""The requests in flight: a table of their tasks, which the drain waits on.

A request's work is its aiohttp handler task: nothing else runs for it, and the one thing ever
said to it from outside is "cancel" at the end of a drain's grace period. So the lifecycle is a
table, not an actor: an actor per request would need a task and a mailbox of its own (a second
task per request doubles the scheduling on the hot path) to receive that one message, which
`Task.cancel` delivers already. `Flow.serve` adds the current task when the request is admitted
and removes it when its answer has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any


class InFlight:
    __slots__ = ("_empty", "_loop", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[Any], float] = {}  # task -> when it was admitted
        self._empty = asyncio.Event()
        self._empty.set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the one requests run in

    def __len__(self) -> int:
        return len(self.tasks)

    def add(self, now: float) -> asyncio.Task[Any]:
        """Register the running task (the request's handler), admitted at `now`; `remove` it
        when it is done."""
        loop = self._loop
        if loop is None or not loop.is_running():  # get_running_loop() costs a getpid() (3.11)
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "a request runs in a task"
        self.tasks[task] = now
        if len(self.tasks) == 1:
            self._empty.clear()
        return task

    def remove(self, task: asyncio.Task[Any]) -> None:
        self.tasks.pop(task, None)
        if not self.tasks:
            self._empty.set()

    def ages(self, now: float) -> list[float]:
        """How long each request in flight has run (smg_http_inflight_request_age_count)."""
        return [now - t for t in self.tasks.values()]

    async def wait_empty(self) -> None:
        await self._empty.wait()

    def cancel_all(self, reason: str) -> int:
        """Cancel every request still running (the drain's grace period is over)."""
        tasks = [t for t in self.tasks if not t.done()]
        for t in tasks:
            t.cancel(reason)
        return len(tasks)
