"""Prefix hash: requests sharing a prompt prefix go to the same worker, with bounded load.

A light alternative to cache_aware's radix tree: hash the first `prefix_token_count` tokens (or
four times as many characters of routing text when the request is not tokenized, else the routing
key) onto the consistent-hash ring of `consistent_hashing.py`. A prefix keeps its worker (and that
worker's KV cache) while the worker set holds still.

Bounded load: the owner is skipped when its in-flight count exceeds both `load_factor` x the mean
and the mean + `balance_abs_threshold` (the absolute part keeps a small pool from bouncing at low
load). The walk goes clockwise around the ring to the next distinct worker that is not
overloaded, so a hot prefix spills to the same neighbour each time; if every worker is
overloaded, the least loaded wins. A request with no key at all goes to the least loaded.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest, least_loaded
from smg.pipeline.policies.consistent_hashing import VIRTUAL_NODES, HashRing, hash64

CHARS_PER_TOKEN = 4


class PrefixHashPolicy:
    __slots__ = ("_ids", "_ring", "balance_abs_threshold", "load_factor", "prefix_token_count")

    name = "prefix_hash"

    def __init__(
        self,
        *,
        prefix_token_count: int = 256,
        load_factor: float = 1.25,
        balance_abs_threshold: int = 10,
    ) -> None:
        self.prefix_token_count = max(1, prefix_token_count)
        self.load_factor = load_factor
        self.balance_abs_threshold = balance_abs_threshold
        self._ids: frozenset[str] = frozenset()
        self._ring = HashRing((), ())

    def key(self, request: RouteRequest) -> str | None:
        """The ring key of a request: its token prefix, else its text prefix, else its routing
        key; None when it has none of them."""
        if request.tokens:
            head = request.tokens[: self.prefix_token_count]
            return "t:" + ",".join(map(str, head))
        if request.text:
            return "c:" + request.text[: CHARS_PER_TOKEN * self.prefix_token_count]
        if request.routing_key:
            return "k:" + request.routing_key
        return None

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        key = self.key(request)
        if key is None or n == 1:
            return least_loaded(candidates)
        index = {c.worker_id: i for i, c in enumerate(candidates)}
        ids = frozenset(index)
        if ids != self._ids:
            self._ring = HashRing.build(ids, VIRTUAL_NODES)
            self._ids = ids
        total = sum(c.load for c in candidates)
        mean = total / n
        limit = max(mean * self.load_factor, mean + self.balance_abs_threshold)
        for wid in self._walk(hash64(key), n):
            i = index[wid]
            if candidates[i].load <= limit:
                return i
        return least_loaded(candidates)

    def _walk(self, point: int, distinct: int) -> Iterator[str]:
        """Owners clockwise from `point`, each once, up to `distinct` of them."""
        points, owners = self._ring.points, self._ring.owners
        start = bisect.bisect_left(points, point)
        seen: set[str] = set()
        m = len(points)
        for step in range(m):
            wid = owners[(start + step) % m]
            if wid not in seen:
                yield wid
                seen.add(wid)
                if len(seen) == distinct:
                    return

    def on_worker_removed(self, worker_id: str) -> None:
        pass  # the ring follows the candidate set on the next call
