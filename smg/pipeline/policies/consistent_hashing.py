"""Consistent hashing: a key always lands on the same worker while the worker set holds still.

Each worker owns `VIRTUAL_NODES` points on a 64-bit ring (blake2b of "<worker id>#<n>", stable
across processes and machines, unlike `hash()`); a key goes to the owner of the first point at or
after its own hash, wrapping around. Adding or removing one of N workers moves only the keys whose
point changes owner, about 1/N of them.

The key is the `X-SMG-Routing-Key` header when present, else the request's routing text; with
neither, a uniformly random candidate. The ring is rebuilt only when the set of candidate ids
changes.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from smg.pipeline.policies.base import Candidate, RouteRequest

VIRTUAL_NODES = 160


def hash64(text: str) -> int:
    """A stable 64-bit hash of `text` (blake2b, 8-byte digest)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class HashRing:
    points: tuple[int, ...]
    """Sorted point hashes."""
    owners: tuple[str, ...]
    """`owners[i]` is the worker id owning `points[i]`."""

    @classmethod
    def build(cls, worker_ids: Iterable[str], virtual_nodes: int = VIRTUAL_NODES) -> HashRing:
        ring = sorted(
            (hash64(f"{wid}#{v}"), wid) for wid in set(worker_ids) for v in range(virtual_nodes)
        )
        return cls(tuple(p for p, _ in ring), tuple(w for _, w in ring))

    def owner(self, key: str) -> str:
        """The worker owning `key`; the ring must not be empty."""
        i = bisect.bisect_left(self.points, hash64(key))
        return self.owners[i if i < len(self.points) else 0]


class ConsistentHashingPolicy:
    __slots__ = ("_ids", "_index", "_ring", "_ring_set", "_rng", "_virtual_nodes", "branches")

    name = "consistent_hashing"

    def __init__(self, rng: random.Random, virtual_nodes: int = VIRTUAL_NODES) -> None:
        self._rng = rng
        self._virtual_nodes = virtual_nodes
        self._ids: tuple[str, ...] = ()
        self._index: dict[str, int] = {}
        self._ring_set: frozenset[str] = frozenset()
        self._ring = HashRing((), ())
        # how each selection went (smg_consistent_hashing_policy_branch_total)
        self.branches = dict.fromkeys(
            ("no_healthy_workers", "random_fallback", "routing_key_hit"), 0
        )

    @property
    def ring(self) -> HashRing:
        return self._ring

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            self.branches["no_healthy_workers"] += 1
            return None
        key = request.routing_key or request.text
        if not key:
            self.branches["random_fallback"] += 1
            return self._rng.randrange(n)
        self.branches["routing_key_hit"] += 1
        ids = tuple(c.worker_id for c in candidates)
        if ids != self._ids:
            id_set = frozenset(ids)
            if id_set != self._ring_set:
                self._ring = HashRing.build(id_set, self._virtual_nodes)
                self._ring_set = id_set
            self._ids = ids
            self._index = {wid: i for i, wid in enumerate(ids)}
        return self._index[self._ring.owner(key)]

    def on_worker_removed(self, worker_id: str) -> None:
        pass  # the ring follows the candidate set on the next call
