"""A tiny hybrid logical clock: stamps ``(wall_ms, counter, node_id)`` that order causally.

``now()`` is strictly greater than every stamp this clock produced or observed, and tracks the
wall clock when it can. Tuples compare field by field, so the node id breaks exact ties.
A stamp more than `MAX_AHEAD_MS` ahead of our wall clock is not observed: one peer with a broken
clock (or a hostile one) must not drag every node's stamps into the far future.
"""

from __future__ import annotations

from collections.abc import Callable

Stamp = tuple[int, int, str]
MAX_AHEAD_MS = 10 * 60 * 1000


class HybridClock:
    def __init__(self, wall: Callable[[], float], node_id: str = "") -> None:
        self._wall = wall
        self.node_id = node_id
        self._l = 0
        self._c = 0

    def now(self) -> Stamp:
        pt = int(self._wall() * 1000)
        if pt > self._l:
            self._l, self._c = pt, 0
        else:
            self._c += 1
        return (self._l, self._c, self.node_id)

    def observe(self, ts: Stamp) -> None:
        """Make every later `now()` greater than `ts` (a stamp read from a peer's record)."""
        if ts[0] > self._wall() * 1000 + MAX_AHEAD_MS:
            return
        if (ts[0], ts[1]) > (self._l, self._c):
            self._l, self._c = ts[0], ts[1]
