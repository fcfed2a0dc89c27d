"""LoopClock timers never run their callback before the deadline, even if the loop wakes early."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from smg.clock import LoopClock, RunningLoop


def early_wake(timer: Any) -> None:
    """What uvloop's millisecond clock can do: the loop runs the timer before its deadline."""
    timer._handle.cancel()
    timer._fire()


async def test_an_early_wake_up_rearms_instead_of_running_the_callback() -> None:
    fired: list[float] = []
    deadline = time.monotonic() + 0.05
    timer = LoopClock().call_later(0.05, lambda: fired.append(time.monotonic()))
    early_wake(timer)
    assert fired == []
    await asyncio.sleep(0.1)
    assert len(fired) == 1 and fired[0] >= deadline


async def test_cancel_holds_after_a_rearm() -> None:
    fired: list[int] = []
    timer = LoopClock().call_later(0.05, lambda: fired.append(1))
    early_wake(timer)
    timer.cancel()
    await asyncio.sleep(0.1)
    assert fired == []


def test_running_loop_is_remembered_while_it_runs_and_asked_again_after() -> None:
    memo = RunningLoop()

    async def twice() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return memo.get(), memo.get()

    first, again = asyncio.run(twice())
    assert first is again  # remembered within one loop
    second, _ = asyncio.run(twice())
    assert second is not first  # the stopped loop is not handed out
