"""Idle-read limits on upstream streams without a timer per chunk.

A reader registers a `Watch` (with the callback that cuts its stream) and bumps
`watch.progress` for every chunk it takes: an integer increment, no clock read. A periodic
`tick()` (every `idle_s / TICKS`, driven by the shell) compares each watch's progress with what
it saw at the previous tick; a watch that made none for `TICKS` ticks in a row is cut. A stream
silent for `idle_s` is therefore cut within `idle_s * (1 + 1/TICKS)`, and one that moved at all
during the last `idle_s` is never cut. The reader releases its watch when it is done, cut or not.

Only time spent waiting on the worker counts: while the reader is busy elsewhere (writing to a
client that reads slowly, so the worker is held back by flow control) it sets `watch.busy`, and
such ticks count as progress. A slow client is the client's business, never the worker's fault.
"""

from __future__ import annotations

from collections.abc import Callable

TICKS = 4


class Watch:
    __slots__ = ("_cut", "_quiet", "_seen", "busy", "expired", "progress")

    def __init__(self, cut: Callable[[], None]) -> None:
        self.progress = 0  # bumped by the reader per chunk
        self.busy = False  # the reader is not waiting on the worker (e.g. writing to its client)
        self.expired = False  # set when the sweeper cut the stream
        self._seen = 0
        self._quiet = 0
        self._cut = cut


class IdleSweeper:
    """The live watches; `tick()` cuts the ones that stayed silent for `idle_s`."""

    __slots__ = ("_watches", "idle_s", "interval_s")

    def __init__(self, idle_s: float) -> None:
        if idle_s <= 0:
            raise ValueError("an idle limit is positive (no limit: no sweeper)")
        self.idle_s = idle_s
        self.interval_s = idle_s / TICKS
        self._watches: set[Watch] = set()

    def watch(self, cut: Callable[[], None]) -> Watch:
        w = Watch(cut)
        self._watches.add(w)
        return w

    def release(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def __len__(self) -> int:
        return len(self._watches)

    def tick(self) -> int:
        """One sweep: returns how many streams it cut."""
        expired: list[Watch] = []
        for w in self._watches:
            if w.busy or w.progress != w._seen:
                w._seen = w.progress
                w._quiet = 0
                continue
            w._quiet += 1
            if w._quiet >= TICKS:
                expired.append(w)
        for w in expired:
            self._watches.discard(w)
            w.expired = True
            w._cut()  # a failing cut is the shell's bug: let it crash the ticker
        return len(expired)
