"""A multi-tenant radix tree over sequence keys: text (characters) or token ids.

One structure serves both modes of the gateway. A key is either a `str` (HTTP mode: the routing
text) or a sequence of token ids (gRPC mode), stored as a compact `array('I')` so a cached prefix
costs 4 bytes per token rather than a pointer plus an int object. The two kinds never match each
other, so one tree may hold both; in practice a model's traffic uses one kind.

Each node holds an edge (a slice of an inserted key), its children keyed by the first element of
their edge, and for every tenant (a worker id) that holds the prefix ending at this node the time
that tenant last inserted through it. Tenancy is prefix-closed: a tenant holding a node holds all
its ancestors, so a tenant's "leaves" are the nodes it holds where no child is held by it, and
evicting those first keeps the tree consistent.

Time is passed in (`now`, any monotonic float); the tree never reads a clock. `match` is a pure
read and does not refresh access times: the cache-aware policy inserts the request's key for the
worker it picked, which refreshes that worker's path (as the Rust gateway does), and a read-only
match keeps lookups cheap and free of side effects.

Sizes: a tenant's size is the number of key elements (characters or tokens) on the nodes it
holds, so a prefix shared by two tenants counts once for each. `total_size` counts each stored
element once.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TypeAlias

Key: TypeAlias = "str | array[int]"
"""The normalised key: a `str` or an `array('I')` of token ids."""

_TOKEN_TYPECODE = "I"


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """The longest stored prefix of a key and the tenants holding all of it."""

    matched: int
    tenants: tuple[str, ...]


class _Node:
    __slots__ = ("children", "key", "parent", "tenants")

    def __init__(self, key: Key, parent: _Node | None, tenants: dict[str, float]) -> None:
        self.key = key
        self.parent = parent  # None for the root and for nodes no longer in the tree
        self.children: dict[object, _Node] = {}
        self.tenants = tenants


def normalize_key(key: str | Sequence[int]) -> Key:
    """A `str` stays as is; token ids (non-negative, < 2**32) are copied into an `array('I')`.

    The copy also keeps a caller's later changes to a mutable sequence out of the tree.
    """
    if isinstance(key, str):
        return key
    return array(_TOKEN_TYPECODE, key)


def _covers(key: Key, pos: int, edge: Key, is_str: bool) -> bool:
    """Whether `key[pos:]` starts with the whole of `edge` (the common, fast case)."""
    if is_str:
        return key.startswith(edge, pos)  # type: ignore[union-attr, arg-type]
    return key[pos : pos + len(edge)] == edge


def _common_len(key: Key, pos: int, edge: Key) -> int:
    """Length of the common prefix of `key[pos:]` and `edge`, at least 1 by the caller's lookup."""
    n = min(len(edge), len(key) - pos)
    if isinstance(key, str):
        if key.startswith(edge[:n], pos):  # type: ignore[arg-type]
            return n
    elif key[pos : pos + n] == edge[:n]:
        return n
    lo, hi = 1, n  # key[pos:pos+lo] matches, key[pos:pos+hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if key[pos : pos + mid] == edge[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _holds_below(node: _Node, tenant: str) -> bool:
    """Whether any child of `node` is held by `tenant`."""
    return any(tenant in child.tenants for child in node.children.values())


class RadixTree:
    """Longest-prefix matching with per-tenant LRU eviction. Not thread-safe; one owner."""

    __slots__ = ("_node_count", "_root", "_sizes", "_total")

    def __init__(self) -> None:
        self._root = _Node("", None, {})
        self._sizes: dict[str, int] = {}
        self._total = 0
        self._node_count = 0

    # ---- reads ---------------------------------------------------------------------------------

    @property
    def total_size(self) -> int:
        """Key elements stored in the tree, each counted once."""
        return self._total

    @property
    def node_count(self) -> int:
        """Nodes in the tree, the root excluded."""
        return self._node_count

    def tenant_size(self, tenant: str) -> int:
        """Key elements held by `tenant` (0 if it holds nothing)."""
        return self._sizes.get(tenant, 0)

    def tenant_sizes(self) -> dict[str, int]:
        """Size of every tenant holding something (a copy)."""
        return dict(self._sizes)

    def match(self, key: str | Sequence[int], among: AbstractSet[str] | None = None) -> PrefixMatch:
        """The longest prefix of `key` in the tree and the tenants holding it.

        With `among`, only those tenants count: the result is the longest prefix held by any of
        them, and `tenants` lists which of them hold it. Read-only: access times do not change.
        """
        k = normalize_key(key)
        is_str = isinstance(k, str)
        n = len(k)
        node = self._root
        pos = 0
        deepest: _Node | None = None
        while pos < n:
            child = node.children.get(k[pos])
            if child is None:
                break
            if among is not None and among.isdisjoint(child.tenants):
                break
            edge = child.key
            deepest = child
            if _covers(k, pos, edge, is_str):
                pos += len(edge)
                node = child
            else:
                pos += _common_len(k, pos, edge)
                break
        if deepest is None:
            return PrefixMatch(0, ())
        if among is None:
            return PrefixMatch(pos, tuple(deepest.tenants))
        return PrefixMatch(pos, tuple(t for t in deepest.tenants if t in among))

    def match_tenant(self, key: str | Sequence[int], tenant: str) -> int:
        """Length of the longest prefix of `key` that `tenant` holds."""
        return self.match(key, among=frozenset((tenant,))).matched

    # ---- writes --------------------------------------------------------------------------------

    def insert(self, key: str | Sequence[int], tenant: str, now: float) -> None:
        """Record that `tenant` holds `key` (and so all its prefixes), touched at `now`.

        O(len(key)): walks the existing path, splitting the edge where the key diverges, and
        refreshes `tenant`'s access time on every node of the path.
        """
        k = normalize_key(key)
        is_str = isinstance(k, str)
        n = len(k)
        node = self._root
        pos = 0
        sizes = self._sizes
        while pos < n:
            first = k[pos]
            child = node.children.get(first)
            if child is None:
                leaf = _Node(k[pos:] if pos else k, node, {tenant: now})
                node.children[first] = leaf
                sizes[tenant] = sizes.get(tenant, 0) + n - pos
                self._total += n - pos
                self._node_count += 1
                return
            edge = child.key
            if _covers(k, pos, edge, is_str):
                m = len(edge)
            else:
                m = _common_len(k, pos, edge)
                child = self._split(child, m)
            if tenant not in child.tenants:
                sizes[tenant] = sizes.get(tenant, 0) + m
            child.tenants[tenant] = now
            pos += m
            node = child

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge after `at` elements; returns the new upper node."""
        parent = node.parent
        assert parent is not None
        edge = node.key
        upper = _Node(edge[:at], parent, dict(node.tenants))
        parent.children[edge[0]] = upper
        node.key = edge[at:]
        node.parent = upper
        upper.children[node.key[0]] = node
        self._node_count += 1
        return upper

    def _detach(self, node: _Node) -> None:
        """Take a tenant-less leaf out of the tree."""
        parent = node.parent
        assert parent is not None and not node.tenants and not node.children
        del parent.children[node.key[0]]
        node.parent = None
        self._total -= len(node.key)
        self._node_count -= 1

    def _try_merge(self, node: _Node) -> None:
        """Fold `node` into its only child when both have the same tenants and access times.

        Then the pair is exactly what one insert would have made, so merging loses nothing; with
        different times it would blur LRU order (a recently used short prefix would be evicted
        with its stale extension). The child survives with the joined edge; `node` is marked dead
        (parent None) so stale references to it are recognisable.
        """
        parent = node.parent
        if parent is None or len(node.children) != 1:
            return
        (child,) = node.children.values()
        if child.tenants != node.tenants:
            return
        child.key = node.key + child.key  # type: ignore[operator]
        child.parent = parent
        parent.children[node.key[0]] = child
        node.parent = None
        node.children = {}
        self._node_count -= 1

    def _drop(self, node: _Node, tenant: str) -> None:
        """Remove `tenant` from `node`, which must be one of its leaves; tidies the tree."""
        del node.tenants[tenant]
        size = self._sizes[tenant] - len(node.key)
        if size:
            self._sizes[tenant] = size
        else:
            del self._sizes[tenant]
        parent = node.parent
        assert parent is not None
        if node.tenants:
            self._try_merge(node)
        else:
            self._detach(node)
            self._try_merge(parent)

    def remove_tenant(self, tenant: str) -> None:
        """Forget everything `tenant` holds; nodes nobody else holds go away."""
        if tenant not in self._sizes:
            return
        held: list[_Node] = []
        stack = [c for c in self._root.children.values() if tenant in c.tenants]
        while stack:
            node = stack.pop()
            held.append(node)
            stack.extend(c for c in node.children.values() if tenant in c.tenants)
        # Descendants come after their ancestors in `held`: walking it backwards visits leaves
        # first, so each node is a leaf of `tenant` when it is dropped.
        for node in reversed(held):
            if node.parent is not None:
                self._drop(node, tenant)

    def evict(self, max_size_per_tenant: int) -> int:
        """Drop least-recently-used leaves of each tenant above the bound; returns elements freed.

        Each tenant over the bound loses its oldest leaves (by its own access times) until its
        size is at most `max_size_per_tenant`. A node no tenant holds any more is removed. Cost:
        one pass over the tree plus a heap pop per evicted node, all at once: a shell on an event
        loop should run an `Eviction` in slices instead.
        """
        job = Eviction(self, max_size_per_tenant)
        while not job.step(1 << 62):
            pass
        return job.freed


class Eviction:
    """One LRU eviction pass over a tree (see `RadixTree.evict`), run in bounded steps.

    `step(budget)` does at most `budget` units of work (a unit is one node scanned or one heap
    entry popped, each a few microseconds) and returns whether the pass is over, so an owner on
    an event loop can yield between steps. The tree stays usable between steps: `match`,
    `insert` and `remove_tenant` may run, and the pass copes with what they change.

    The pass first scans the tree for each over-bound tenant's leaves (into a heap per tenant),
    then pops them oldest first. Every popped entry is checked against the live tree, so work
    done between steps never makes it drop the wrong prefix: an entry whose node left the tree
    is skipped, one whose node gained a child held by the tenant is skipped (it is no leaf), and
    one whose access time was refreshed is pushed back with the new time. Bounds and sizes are
    read live. Best effort over a moving tree: a node made after the scan passed its place is
    only considered if a drop below it exposes it, so a pass may end with a tenant still over
    the bound; the next pass finishes the job.
    """

    __slots__ = ("_bound", "_heaps", "_order", "_seq", "_stack", "_tree", "done", "freed")

    def __init__(self, tree: RadixTree, max_size_per_tenant: int) -> None:
        self._tree = tree
        self._bound = max_size_per_tenant
        over = [t for t, s in tree._sizes.items() if s > max_size_per_tenant]
        self._heaps: dict[str, list[tuple[float, int, _Node]]] = {t: [] for t in over}
        self._order = list(reversed(over))  # tenants still to pop, last first
        self._stack = list(tree._root.children.values()) if over else []
        self._seq = 0
        self.freed = 0
        self.done = not over

    def step(self, budget: int) -> bool:
        """Work for at most `budget` units (at least one); returns True once the pass is over."""
        budget = max(1, budget)
        if self._stack:
            budget = self._scan(budget)
        while budget > 0 and not self._stack and self._order:
            budget = self._pop(self._order[-1], budget)
        self.done = not self._stack and not self._order
        return self.done

    def _scan(self, budget: int) -> int:
        stack, heaps, push = self._stack, self._heaps, heapq.heappush
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
                        push(heap, (stamp, self._seq, node))
                        self._seq += 1
        return budget

    def _pop(self, tenant: str, budget: int) -> int:
        tree, heap, bound = self._tree, self._heaps[tenant], self._bound
        push, pop = heapq.heappush, heapq.heappop
        while budget > 0:
            if not heap or tree._sizes.get(tenant, 0) <= bound:
                self._order.pop()
                del self._heaps[tenant]
                return budget
            budget -= 1
            stamp, _, node = pop(heap)
            now_stamp = node.tenants.get(tenant)
            if node.parent is None or now_stamp is None or _holds_below(node, tenant):
                continue  # stale: gone, dropped by this tenant, or no longer one of its leaves
            if now_stamp != stamp:
                push(heap, (now_stamp, self._seq, node))  # refreshed between steps
                self._seq += 1
                continue
            parent = node.parent
            self.freed += len(node.key)
            tree._drop(node, tenant)
            if parent.parent is not None and tenant in parent.tenants:
                if not _holds_below(parent, tenant):
                    push(heap, (parent.tenants[tenant], self._seq, parent))
                    self._seq += 1
        return budget
