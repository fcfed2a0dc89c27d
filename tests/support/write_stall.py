"""Shared by the connection guard's tests: wait until a connection's client has stopped taking
response bytes (as the sweeper's samples show it)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from smg.core.conn_deadlines import Sample


class Sampled(Protocol):
    def sample(self) -> Sample: ...


async def until_stalled(conn: Sampled, *, quiet_s: float = 0.2, within_s: float = 5.0) -> int:
    """Poll `conn.sample()` until bytes wait and none was taken for `quiet_s`; the bytes taken
    by then. Fails if that does not happen within `within_s`."""
    last, still, need = -1, 0, round(quiet_s / 0.01)
    for _ in range(round(within_s / 0.01)):
        await asyncio.sleep(0.01)
        sample = conn.sample()
        still = still + 1 if sample.sent == last and sample.buffered > 0 else 0
        last = sample.sent
        if still >= need:
            return last
    raise AssertionError("the stream never filled the buffers")
