"""A bounded mailbox with a control lane and a chosen overflow policy.

Cheaper than `asyncio.Queue` on the hot path: a deque and one waiter future. Control messages
(stop, refute) go in a separate lane that is always read first and is never dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from enum import Enum
from typing import Any


class Overflow(Enum):
    REJECT = "reject"  # tell raises MailboxFull: the sender decides (back-pressure)
    DROP_OLDEST = "drop_oldest"  # gossip-like traffic: the newest wins


class MailboxFull(Exception):
    pass


class MailboxClosed(Exception):
    pass


Envelope = tuple[Any, "asyncio.Future[Any] | None"]


class Mailbox:
    __slots__ = (
        "_closed",
        "_control",
        "_items",
        "_space_waiters",
        "_waiter",
        "capacity",
        "dropped",
        "overflow",
    )

    def __init__(self, capacity: int = 1024, overflow: Overflow = Overflow.REJECT) -> None:
        if capacity < 1:
            raise ValueError("mailbox capacity must be at least 1")
        self.capacity = capacity
        self.overflow = overflow
        self.dropped = 0
        self._items: deque[Envelope] = deque()
        self._control: deque[Envelope] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._space_waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items) + len(self._control)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def control_pending(self) -> bool:
        """A control message (stop) waits: a long, sliced job should wind up."""
        return bool(self._control)

    def put(self, envelope: Envelope) -> None:
        if self._closed:
            raise MailboxClosed
        if len(self._items) >= self.capacity:
            if self.overflow is Overflow.DROP_OLDEST:
                _, reply = self._items.popleft()
                self.dropped += 1
                if reply is not None and not reply.done():
                    reply.set_exception(MailboxFull("dropped from a full mailbox"))
            else:
                raise MailboxFull(f"mailbox full ({self.capacity})")
        self._items.append(envelope)
        self._wake()

    async def put_wait(self, envelope: Envelope) -> None:
        """Back-pressure: wait for room instead of failing."""
        while len(self._items) >= self.capacity and not self._closed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._space_waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake_sender()  # woken, then cancelled: hand the room to the next one
                elif fut in self._space_waiters:
                    self._space_waiters.remove(fut)
                raise
        self.put(envelope)

    def put_control(self, envelope: Envelope) -> None:
        if self._closed:
            raise MailboxClosed
        self._control.append(envelope)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _wake_sender(self) -> None:
        """Wake the first sender still waiting for room (skipping ones that gave up)."""
        while self._space_waiters:
            sw = self._space_waiters.popleft()
            if not sw.done():
                sw.set_result(None)
                return

    async def get(self) -> Envelope:
        while True:
            if self._control:
                return self._control.popleft()
            if self._items:
                env = self._items.popleft()
                self._wake_sender()
                return env
            if self._closed:
                raise MailboxClosed
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> list[Envelope]:
        """Close and hand back whatever was still queued (so pending asks can be failed)."""
        self._closed = True
        rest = list(self._control) + list(self._items)
        self._control.clear()
        self._items.clear()
        while self._space_waiters:
            sw = self._space_waiters.popleft()
            if not sw.done():
                sw.set_result(None)
        self._wake()
        return rest

    def reopen(self) -> None:
        self._closed = False
