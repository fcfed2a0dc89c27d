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

Bytes: `total_bytes` estimates the memory the tree holds, kept up to date by every change: per
node `NODE_BYTES` (the node, its two small dicts, its entry in its parent), `TENANT_BYTES` per
tenant entry, and the key object itself (`sys.getsizeof`: 49 + n bytes for an ASCII `str`, up to
76 + 4n for other text, 64 + 4n for token ids). Measured with tracemalloc on trees of random
prompts (1-4 tenants, shared prefixes or not), the estimate is within 15% of the real memory;
`tests/pipeline/test_radix_tree_bytes.py` holds it to 25%. An owner bounds the tree with it (the
cache-aware state refuses an insert that could pass its byte cap: `insert_bound`) and evicts
toward a byte target (`smg.pipeline.radix_eviction`: `Eviction` in steps, `evict` at once).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TypeAlias

Key: TypeAlias = "str | array[int]"
"""The normalised key: a `str` or an `array('I')` of token ids."""

_TOKEN_TYPECODE = "I"

NODE_BYTES = 360  # a node (64 B), its tenants and children dicts (~184 B while small), its slot
TENANT_BYTES = 40  # a tenant's entry on a node: a dict slot and, often, its own float
_SPLIT_KEY_BYTES = 64  # a split turns one key object into two: one more object header


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


class RadixTree:
    """Longest-prefix matching with per-tenant LRU eviction. Not thread-safe; one owner."""

    __slots__ = ("_bytes", "_node_count", "_root", "_sizes", "_total")

    def __init__(self) -> None:
        self._root = _Node("", None, {})
        self._sizes: dict[str, int] = {}
        self._total = 0
        self._node_count = 0
        self._bytes = 0

    # ---- reads ---------------------------------------------------------------------------------

    @property
    def total_size(self) -> int:
        """Key elements stored in the tree, each counted once."""
        return self._total

    @property
    def total_bytes(self) -> int:
        """The estimated memory of the tree's nodes, keys and tenant entries (see the module)."""
        return self._bytes

    def insert_bound(self, key: str | Sequence[int]) -> int:
        """The most `total_bytes` can grow by inserting `key` (for any tenant): a new leaf with
        the key, a split whose upper half copies the tenants of the node it cuts, and the tenant
        added to every node of the path (at most one per element of the key)."""
        size = sys.getsizeof(key) if isinstance(key, str) else 64 + 4 * len(key)
        path = min(len(key), self._node_count)
        tenants = len(self._sizes) + 1 + path
        return size + _SPLIT_KEY_BYTES + 2 * NODE_BYTES + tenants * TENANT_BYTES

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
                self._bytes += NODE_BYTES + TENANT_BYTES + sys.getsizeof(leaf.key)
                return
            edge = child.key
            if _covers(k, pos, edge, is_str):
                m = len(edge)
            else:
                m = _common_len(k, pos, edge)
                child = self._split(child, m)
            if tenant not in child.tenants:
                sizes[tenant] = sizes.get(tenant, 0) + m
                self._bytes += TENANT_BYTES
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
        size = sys.getsizeof
        self._bytes += NODE_BYTES + TENANT_BYTES * len(upper.tenants)
        self._bytes += size(upper.key) + size(node.key) - size(edge)
        return upper

    def _detach(self, node: _Node) -> None:
        """Take a tenant-less leaf out of the tree."""
        parent = node.parent
        assert parent is not None and not node.tenants and not node.children
        del parent.children[node.key[0]]
        node.parent = None
        self._total -= len(node.key)
        self._node_count -= 1
        self._bytes -= NODE_BYTES + sys.getsizeof(node.key)

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
        size = sys.getsizeof
        before = size(node.key) + size(child.key)
        child.key = node.key + child.key  # type: ignore[operator]
        self._bytes += size(child.key) - before - NODE_BYTES - TENANT_BYTES * len(node.tenants)
        child.parent = parent
        parent.children[node.key[0]] = child
        node.parent = None
        node.children = {}
        self._node_count -= 1

    def _drop(self, node: _Node, tenant: str) -> None:
        """Remove `tenant` from `node`, which must be one of its leaves; tidies the tree."""
        del node.tenants[tenant]
        self._bytes -= TENANT_BYTES
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
