"""Admission: at most N requests in flight, a bounded FIFO queue for the rest, a queue deadline.

A full queue answers 429 at once; a request that waits past the deadline answers 408. The permit
is held until the response body ends (streams included). A released permit is handed straight
to the oldest waiter, so the count never dips and late arrivals cannot jump the queue.

Once the gateway drains, nothing new is admitted: `close()` answers every queued request 503
`shutting_down` (and the edge's `refuse_while_draining` answers new requests 503 before their
body is read).
"""

from __future__ import annotations

import asyncio
from collections import deque

from smg import errors
from smg.clock import Clock


class Admission:
    __slots__ = (
        "_waiters",
        "active",
        "admitted",
        "clock",
        "closed",
        "limit",
        "queue_size",
        "rejected",
        "timeout_s",
    )

    def __init__(self, limit: int, queue_size: int, timeout_s: float, clock: Clock) -> None:
        self.limit = limit  # 0: unlimited
        self.queue_size = queue_size
        self.timeout_s = timeout_s
        self.clock = clock
        self.active = 0
        self.admitted = 0  # smg_http_rate_limit_total{result="allowed"}
        self.rejected = 0  # {result="rejected"}: the queue was full or the wait timed out
        self.closed = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def draining(self) -> bool:
        """The gateway drains: nothing new is admitted (the edge and readiness read this)."""
        return self.closed

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.closed:
            raise errors.draining()
        if self.limit <= 0 or (self.active < self.limit and not self._waiters):
            self.active += 1
            self.admitted += 1
            return
        if len(self._waiters) >= self.queue_size:
            self.rejected += 1
            raise errors.queue_full()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        timeout_s = self.timeout_s

        def expire() -> None:
            if not fut.done():
                fut.set_exception(errors.queue_timeout(timeout_s))

        timer = self.clock.call_later(timeout_s, expire)
        try:
            await fut
            self.admitted += 1
        except errors.ApiError:
            self.rejected += 1
            raise
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release()  # the permit arrived as we were cancelled: pass it on
            raise
        finally:
            timer.cancel()
            try:
                self._waiters.remove(fut)
            except ValueError:
                pass

    def close(self) -> None:
        """Admit nothing more; the queued requests get 503 `shutting_down`."""
        self.closed = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(errors.draining())

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the permit moves to the waiter; `active` is unchanged
                return
        self.active -= 1
