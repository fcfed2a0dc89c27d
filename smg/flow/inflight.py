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

from smg.clock import RunningLoop


class InFlight:
    __slots__ = ("_loop", "_waiters", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[Any], float] = {}  # task -> when it was admitted
        # who waits for the table to empty (the drain): a future each, woken by the last
        # `remove`; no Event set and cleared by every request that finds the table empty
        self._waiters: list[asyncio.Future[None]] = []
        self._loop = RunningLoop()

    def __len__(self) -> int:
        return len(self.tasks)

    def add(self, now: float) -> asyncio.Task[Any]:
        """Register the running task (the request's handler), admitted at `now`; `remove` it
        when it is done."""
        task = asyncio.current_task(self._loop.get())
        assert task is not None, "a request runs in a task"
        self.tasks[task] = now
        return task

    def remove(self, task: asyncio.Task[Any]) -> None:
        tasks = self.tasks
        tasks.pop(task, None)
        if not tasks and self._waiters:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(None)

    def ages(self, now: float) -> list[float]:
        """How long each request in flight has run (smg_http_inflight_request_age_count)."""
        return [now - t for t in self.tasks.values()]

    async def wait_empty(self) -> None:
        """Return once no request is in flight (at once if none is)."""
        while self.tasks:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                self._waiters.remove(fut)

    def cancel_all(self, reason: str) -> int:
        """Cancel every request still running (the drain's grace period is over)."""
        tasks = [t for t in self.tasks if not t.done()]
        for t in tasks:
            t.cancel(reason)
        return len(tasks)
