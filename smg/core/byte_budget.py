"""The budget of request-body bytes the gateway may hold at once (pure: no IO, no clock).

A request takes its body's size from the budget before the body is read and gives it back when
its response has ended (the raw body, its parsed form and the forwarded copy live that long).
Two rules keep large bodies from starving small ones:

- a quarter of the budget is kept for small bodies (at most 1/64 of the budget each): large
  bodies together hold at most three quarters, so a body over that can never get in (the caller
  answers 413 at once instead of letting it wait);
- waiting is first come, first served within each class only: a small body never queues behind
  a large one that does not fit yet.

`request` grants at once or queues a ticket; `release` and `cancel` return the tickets they let
in (the shell wakes their waiters). A queued ticket leaves only through a grant or `cancel`.
"""

from __future__ import annotations

from collections import OrderedDict

SMALL_DIVISOR = 64  # a small body is at most this fraction of the budget
LARGE_SHARE = 0.75  # what large bodies may hold together


class ByteBudget:
    __slots__ = (
        "_queue",
        "_queued",
        "capacity",
        "held",
        "large_cap",
        "large_held",
        "largest",
        "small_max",
    )

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a byte budget needs a positive capacity, not {capacity}")
        self.capacity = capacity
        self.small_max = max(1, capacity // SMALL_DIVISOR)
        self.large_cap = max(self.small_max, int(capacity * LARGE_SHARE))
        self.largest = self.large_cap  # the biggest body that can ever be granted
        self.held = 0
        self.large_held = 0
        self._queue: OrderedDict[int, int] = OrderedDict()  # ticket -> bytes, oldest first
        self._queued = [0, 0]  # tickets waiting: [small, large]

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def is_large(self, n: int) -> bool:
        return n > self.small_max

    def fits(self, n: int) -> bool:
        if self.held + n > self.capacity:
            return False
        return not self.is_large(n) or self.large_held + n <= self.large_cap

    def request(self, ticket: int, n: int) -> bool:
        """Take `n` bytes now (True) or queue `ticket` for them (False). `n` must be at most
        `largest`."""
        if n > self.largest:
            raise ValueError(f"{n} bytes can never fit: the largest grant is {self.largest}")
        # `fits` and `_take` written out: every request body comes through here
        held = self.held + n
        if n <= self.small_max:
            if held <= self.capacity and not self._queued[0]:
                self.held = held
                return True
            large = False
        else:
            large_held = self.large_held + n
            if held <= self.capacity and large_held <= self.large_cap and not self._queued[1]:
                self.held, self.large_held = held, large_held
                return True
            large = True
        self._queue[ticket] = n
        self._queued[large] += 1
        return False

    def release(self, n: int) -> list[int]:
        """Give back a grant of `n` bytes; the tickets this lets in."""
        self._give(n)
        return self._grant() if self._queue else []

    def shrink(self, n: int, to: int) -> list[int]:
        """A grant of `n` bytes turns out to need only `to` (a body of unknown length, read);
        the tickets the difference lets in."""
        if not 0 <= to <= n:
            raise ValueError(f"cannot shrink a grant of {n} bytes to {to}")
        self._give(n)
        self._take(to)
        return self._grant()

    def cancel(self, ticket: int) -> list[int]:
        """`ticket` stops waiting (deadline, client gone); the tickets its leaving lets in."""
        n = self._queue.pop(ticket, None)
        if n is None:
            return []
        self._queued[self.is_large(n)] -= 1
        return self._grant()

    def _take(self, n: int) -> None:
        self.held += n
        if n > self.small_max:  # is_large, without the call
            self.large_held += n

    def _give(self, n: int) -> None:
        self.held -= n
        if n > self.small_max:
            self.large_held -= n
        if self.held < 0 or self.large_held < 0:
            raise ValueError("released more bytes than were held")

    def _grant(self) -> list[int]:
        granted: list[int] = []
        blocked = [False, False]  # per class [small, large]: an older waiter does not fit yet
        for ticket, n in list(self._queue.items()):
            large = self.is_large(n)
            if blocked[large]:
                continue
            if self.fits(n):
                del self._queue[ticket]
                self._queued[large] -= 1
                self._take(n)
                granted.append(ticket)
            else:
                blocked[large] = True
        return granted
