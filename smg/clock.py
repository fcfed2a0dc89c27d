"""Injected time.

Everything that waits or reads the time takes a `Clock`, so tests run timers in simulated time:
`FakeClock.advance()` jumps from deadline to deadline instead of sleeping. Pure cores never see a
clock; their shells hand them `now` (monotonic seconds).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class RunningLoop:
    """The running event loop, remembered for the hot paths that ask for it on every request:
    `asyncio.get_running_loop()` makes a getpid() system call on CPython 3.11. Asked again once
    the remembered loop has stopped (a test's next loop)."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """The real clock: the running event loop's monotonic time."""

    __slots__ = ()

    # time.monotonic itself, not a method calling it: a request reads the clock 5-7 times and
    # each Python frame around it costs more than the read
    now = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` once `now()` has reached now + delay. uvloop's timers run on a cached
        millisecond clock and may fire a hair early; a callback that then compared `now()` with
        its deadline would see it not yet due (a circuit breaker stayed open that way)."""
        return _NotBefore(time.monotonic() + max(0.0, delay), callback)


class _NotBefore:
    """A loop timer that re-arms itself if the loop wakes it before its deadline."""

    __slots__ = ("_callback", "_deadline", "_handle")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self._deadline = deadline
        self._callback = callback
        self._handle = asyncio.get_running_loop().call_later(
            deadline - time.monotonic(), self._fire
        )

    def _fire(self) -> None:
        left = self._deadline - time.monotonic()
        if left > 0:
            self._handle = asyncio.get_running_loop().call_later(left, self._fire)
            return
        self._callback()

    def cancel(self) -> None:
        self._handle.cancel()


class _FakeTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Simulated time: timers fire only when the test advances the clock."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(callback)
        heapq.heappush(self._timers, (self._now + max(0.0, delay), next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await fut
        finally:
            timer.cancel()

    def next_deadline(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, firing due timers in deadline order and letting the
        woken tasks run after each one."""
        target = self._now + seconds
        await settle()
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > target:
                break
            self._now = max(self._now, deadline)
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.cancelled = True
                timer.callback()
            await settle()
        self._now = target
        await settle()


async def settle(rounds: int = 30) -> None:
    """Let ready callbacks run; a few loop iterations cover chains of wake-ups."""
    for _ in range(rounds):
        await asyncio.sleep(0)
