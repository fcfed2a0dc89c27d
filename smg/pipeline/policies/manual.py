"""Manual (sticky) routing: each `X-SMG-Routing-Key` stays on the worker it was first given.

On first sight a key gets a random primary worker and, when there is another candidate, a random
backup (random rather than least-loaded: sessions outlive momentary load, and random spreads keys
evenly). While the primary is routable the key goes there; adding workers never moves a key. When
the primary is not routable the backup, if routable, becomes the primary (and a new backup is
drawn); when neither is, the key is assigned afresh. Requests without a key go to a random
candidate.

The map is an LRU bounded at `max_entries` keys, so it cannot grow without limit.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest

MAX_ENTRIES = 100_000


class ManualPolicy:
    __slots__ = ("_max_entries", "_rng", "_sticky", "branches")

    name = "manual"

    def __init__(self, rng: random.Random, max_entries: int = MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._rng = rng
        self._max_entries = max_entries
        self._sticky: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # how each selection went (smg_manual_policy_branch_total, the Rust gateway's names)
        self.branches = dict.fromkeys(
            ("no_healthy_workers", "no_routing_id", "occupied_hit", "occupied_miss", "vacant"), 0
        )

    def __len__(self) -> int:
        return len(self._sticky)

    def keys_by_worker(self) -> dict[str, int]:
        """Routing keys held per worker id (their primary): smg_worker_routing_keys_active."""
        out: dict[str, int] = {}
        for workers in self._sticky.values():
            out[workers[0]] = out.get(workers[0], 0) + 1
        return out

    def assignment(self, routing_key: str) -> tuple[str, ...] | None:
        """(primary, backup) worker ids of a key, or (primary,), or None if unknown."""
        return self._sticky.get(routing_key)

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        branches = self.branches
        if n == 0:
            branches["no_healthy_workers"] += 1
            return None
        key = request.routing_key
        if not key:
            branches["no_routing_id"] += 1
            return self._rng.randrange(n)
        index = {c.worker_id: i for i, c in enumerate(candidates)}
        sticky = self._sticky
        assigned = sticky.get(key)
        if assigned is not None and assigned[0] in index:
            branches["occupied_hit"] += 1
            sticky.move_to_end(key)
            return index[assigned[0]]
        branches["vacant" if assigned is None else "occupied_miss"] += 1
        survivors = [w for w in assigned or () if w in index]
        primary = survivors[0] if survivors else candidates[self._rng.randrange(n)].worker_id
        sticky[key] = self._with_backup(primary, candidates)
        sticky.move_to_end(key)
        while len(sticky) > self._max_entries:
            sticky.popitem(last=False)
        return index[primary]

    def _with_backup(self, primary: str, candidates: Sequence[Candidate]) -> tuple[str, ...]:
        others = [c.worker_id for c in candidates if c.worker_id != primary]
        if not others:
            return (primary,)
        return (primary, others[self._rng.randrange(len(others))])

    def on_worker_removed(self, worker_id: str) -> None:
        """Drop the worker from every assignment; keys it was primary for fall to their backup."""
        for key, assigned in list(self._sticky.items()):
            if worker_id in assigned:
                rest = tuple(w for w in assigned if w != worker_id)
                if rest:
                    self._sticky[key] = rest
                else:
                    del self._sticky[key]
