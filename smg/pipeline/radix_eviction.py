"""LRU eviction of a `RadixTree`, as a job run in bounded steps (pure; no IO).

Two bounds, applied in this order by one pass:

- per tenant, in key elements (`--max-tree-size`, the Rust gateway's): each tenant over it
  loses its own oldest leaves until it is back under;
- with `max_bytes`, for the tree: the oldest leaves of any tenant go, least recently used first,
  until the tree's estimated `total_bytes` is at most that.

`step(budget)` does at most `budget` units of work (a unit is one node scanned or one heap entry
popped, each a few microseconds) and returns whether the pass is over, so an owner on an event
loop can yield between steps. The tree stays usable between steps: `match`, `insert` and
`remove_tenant` may run, and the pass copes with what they change.

The pass first scans the tree for the leaves it may drop (into a heap per over-bound tenant, and
with a byte target one heap over all tenants: ~130 bytes per leaf while the pass runs), then pops
them oldest first. Every popped entry is checked against the live tree, so work done between
steps never makes it drop the wrong prefix: an entry whose node left the tree is skipped, one
whose node gained a child held by the tenant is skipped (it is no leaf), and one whose access
time was refreshed is pushed back with the new time. Bounds and sizes are read live. Best effort
over a moving tree: a node made after the scan passed its place is only considered if a drop
below it exposes it, so a pass may end with a tenant (or the tree) still over; the next pass
finishes the job.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial

from smg.pipeline.radix_tree import RadixTree, _Node

Entry = tuple[float, int, str, _Node]  # (access time, tie-breaker, tenant, leaf)


def _holds_below(node: _Node, tenant: str) -> bool:
    """Whether any child of `node` is held by `tenant`."""
    return any(tenant in child.tenants for child in node.children.values())


class Eviction:
    """One LRU eviction pass over a tree (see the module), run in bounded steps."""

    __slots__ = (
        "_bound",
        "_heaps",
        "_lru",
        "_max_bytes",
        "_order",
        "_seq",
        "_stack",
        "_tree",
        "done",
        "freed",
    )

    def __init__(
        self, tree: RadixTree, max_size_per_tenant: int, max_bytes: int | None = None
    ) -> None:
        self._tree = tree
        self._bound = max_size_per_tenant
        over = [t for t, s in tree._sizes.items() if s > max_size_per_tenant]
        self._heaps: dict[str, list[Entry]] = {t: [] for t in over}
        self._order = list(reversed(over))  # tenants still to pop, last first
        self._max_bytes = max_bytes if max_bytes is not None else 1 << 62
        # every tenant's leaves, for the byte target (None: the tree is within it)
        self._lru: list[Entry] | None = [] if tree.total_bytes > self._max_bytes else None
        scan = over or self._lru is not None
        self._stack = list(tree._root.children.values()) if scan else []
        self._seq = 0
        self.freed = 0
        self.done = not scan

    def step(self, budget: int) -> bool:
        """Work for at most `budget` units (at least one); returns True once the pass is over."""
        budget = max(1, budget)
        if self._stack:
            budget = self._scan(budget)
        while budget > 0 and not self._stack and self._order:
            tenant = self._order[-1]
            heap = self._heaps[tenant]
            budget, finished = self._pop(heap, partial(self._tenant_within, tenant), budget)
            if finished:
                self._order.pop()
                del self._heaps[tenant]
        if budget > 0 and not self._stack and not self._order and self._lru is not None:
            budget, finished = self._pop(self._lru, self._bytes_within, budget)
            if finished:
                self._lru = None
        self.done = not self._stack and not self._order and self._lru is None
        return self.done

    def _tenant_within(self, tenant: str) -> bool:
        return self._tree._sizes.get(tenant, 0) <= self._bound

    def _bytes_within(self) -> bool:
        return self._tree.total_bytes <= self._max_bytes

    def _scan(self, budget: int) -> int:
        stack, heaps, lru, push = self._stack, self._heaps, self._lru, heapq.heappush
        while stack and budget > 0:
            budget -= 1
            node = stack.pop()
            if node.parent is None:
                continue  # left the tree between steps (its subtree went with it or was merged)
            children = node.children.values()
            stack.extend(children)
            below: set[str] = set()  # tenants holding a child: the node is no leaf of theirs
            for child in children:
                below.update(child.tenants)
            for tenant, stamp in node.tenants.items():
                if tenant not in below:
                    heap = heaps.get(tenant)
                    if heap is not None:
                        push(heap, (stamp, self._seq, tenant, node))
                        self._seq += 1
                    if lru is not None:
                        push(lru, (stamp, self._seq, tenant, node))
                        self._seq += 1
        return budget

    def _pop(self, heap: list[Entry], within: Callable[[], bool], budget: int) -> tuple[int, bool]:
        """Drop the oldest leaves in `heap` until `within()`; (budget left, whether finished)."""
        tree = self._tree
        push, pop = heapq.heappush, heapq.heappop
        while budget > 0:
            if not heap or within():
                return budget, True
            budget -= 1
            stamp, _, tenant, node = pop(heap)
            now_stamp = node.tenants.get(tenant)
            if node.parent is None or now_stamp is None or _holds_below(node, tenant):
                continue  # stale: gone, dropped by this tenant, or no longer one of its leaves
            if now_stamp != stamp:
                push(heap, (now_stamp, self._seq, tenant, node))  # refreshed between steps
                self._seq += 1
                continue
            parent = node.parent
            self.freed += len(node.key)
            tree._drop(node, tenant)
            if parent.parent is not None and tenant in parent.tenants:
                if not _holds_below(parent, tenant):  # a new leaf of the tenant's, for both
                    entry = (parent.tenants[tenant], self._seq, tenant, parent)
                    self._seq += 1
                    push(heap, entry)
                    if self._lru is not None and heap is not self._lru:
                        push(self._lru, entry)
        return budget, False


def evict(tree: RadixTree, max_size_per_tenant: int, max_bytes: int | None = None) -> int:
    """Drop least-recently-used leaves of each tenant above the bound; returns elements freed.

    Each tenant over the bound loses its oldest leaves (by its own access times) until its size
    is at most `max_size_per_tenant`; then, with `max_bytes`, the oldest leaves of any tenant go
    until `total_bytes` is at most that. A node no tenant holds any more is removed. Cost: one
    pass over the tree plus a heap pop per evicted node, all at once: a shell on an event loop
    should run an `Eviction` in slices instead.
    """
    job = Eviction(tree, max_size_per_tenant, max_bytes)
    while not job.step(1 << 62):
        pass
    return job.freed
