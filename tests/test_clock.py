"""LoopClock timers never run their callback before the deadline, even if the loop wakes early."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from smg.clock import LoopClock


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
