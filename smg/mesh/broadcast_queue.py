"""Transmit-limited broadcast queue (memberlist's TransmitLimitedQueue, simplified)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


def retransmit_limit(retransmit_mult: int, n: int) -> int:
    """Each update is sent mult * ceil(log10(n + 1)) times: enough to reach all n w.h.p."""
    return retransmit_mult * math.ceil(math.log10(n + 1))


@dataclass(slots=True)
class _Entry(Generic[T]):
    key: str
    item: T
    size: int
    transmits: int
    seq: int


class BroadcastQueue(Generic[T]):
    """Updates keyed by subject (node id): a newer update about a key replaces the older one.

    `take` returns the least-transmitted (then newest) items that fit a byte budget and drops
    items once they reach the retransmit limit."""

    def __init__(self, retransmit_mult: int) -> None:
        self._mult = retransmit_mult
        self._entries: dict[str, _Entry[T]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def push(self, key: str, item: T, size: int) -> None:
        self._seq += 1
        self._entries[key] = _Entry(key, item, size, 0, self._seq)

    def take(self, n_nodes: int, overhead: int, limit: int, max_items: int = 1 << 30) -> list[T]:
        cap = retransmit_limit(self._mult, n_nodes)
        order = sorted(self._entries.values(), key=lambda e: (e.transmits, -e.seq))
        out: list[T] = []
        used = 0
        for e in order:
            if len(out) >= max_items:
                break
            if used + overhead + e.size > limit:
                continue
            used += overhead + e.size
            out.append(e.item)
            e.transmits += 1
            if e.transmits >= cap:
                del self._entries[e.key]
        return out
