"""The asyncio shell of the request-body budget (`smg/core/byte_budget.py` decides who gets in).

`acquire(n)` returns once `n` bytes are held, or raises: 413 at once for a body that can never
fit, 503 `request_body_budget_timeout` when no room came within the deadline. `release(n)` gives
the bytes back and wakes whoever that lets in.
"""

from __future__ import annotations

import asyncio
import itertools

from smg import errors
from smg.clock import Clock
from smg.core.byte_budget import ByteBudget


class BodyBudget:
    __slots__ = ("_seq", "_waiters", "clock", "core", "largest", "timeout_s")

    def __init__(self, capacity: int, timeout_s: float, clock: Clock) -> None:
        self.core = ByteBudget(capacity)
        self.largest = self.core.largest  # the biggest body that can ever get in
        self.timeout_s = timeout_s
        self.clock = clock
        self._seq = itertools.count()
        self._waiters: dict[int, asyncio.Future[None]] = {}

    async def acquire(self, n: int) -> None:
        core = self.core
        if n > core.largest:
            raise errors.body_over_budget(core.capacity, core.largest, size=n)
        ticket = next(self._seq)
        if core.request(ticket, n):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[ticket] = fut

        def expire() -> None:
            if not fut.done():
                self._waiters.pop(ticket, None)
                fut.set_exception(errors.body_budget_timeout(n, self.timeout_s))
                self._wake(core.cancel(ticket))

        timer = self.clock.call_later(self.timeout_s, expire)
        try:
            await fut
        except asyncio.CancelledError:
            if self._waiters.pop(ticket, None) is not None:
                self._wake(core.cancel(ticket))  # still queued: leave the queue
            elif fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(n)  # granted as we were cancelled: give it back
            raise
        finally:
            timer.cancel()

    def release(self, n: int) -> None:
        if tickets := self.core.release(n):
            self._wake(tickets)

    def shrink(self, n: int, to: int) -> None:
        self._wake(self.core.shrink(n, to))

    def _wake(self, tickets: list[int]) -> None:
        for ticket in tickets:
            fut = self._waiters.pop(ticket)
            fut.set_result(None)
