"""Cache-aware routing: send a request where its prefix is likely still in the KV cache.

Each model has a `RadixTree` whose tenants are worker ids; a worker "holds" a prefix when a request
with that prefix was routed to it. For each request (keyed on its token ids when given, else its
text):

1. Loads are read once. If the system is imbalanced (`max - min > balance_abs_threshold` and
   `max > min * balance_rel_threshold`), the least-loaded candidate wins, cache or not.
2. Otherwise the key is matched against what the candidates hold. If the matched share
   (`matched / len(key)`) is above `cache_threshold`, the least-loaded candidate among those
   holding that longest prefix wins; else the candidate holding the least (most cache room) wins,
   ties to the lower load.
3. Either way the key is inserted into the tree for the winner, at `now()`.

A request with no text and no tokens goes to the least-loaded candidate and leaves the tree alone.

With a `kv_index` (the engines' KV events, see `smg.pipeline.kv_index`) and token ids, step 2
scores each candidate whose index is authoritative by its run of consecutive cached blocks
(`blocks * block_size / len(tokens)`); the others are scored by the tree as above. The highest
share wins the same way (least-loaded among those holding it, if above `cache_threshold`). The
tree is still updated for every winner, so it is warm when a worker's stream falls back to it.

When the tree's best share is not above `cache_threshold` and other mesh nodes published hints
(hashes of the prefixes they routed, see `smg.pipeline.prefix_hints`), the longest hinted prefix
among the candidates counts as the match instead, if it is longer: a node that just joined routes
like the others did.

Unlike the Rust gateway, the match only counts routable candidates: a prefix held by a worker that
is down must not pin requests to nobody. The trees live in a `CacheAwareState` that the policy only
references, so a cache-index actor can own them (and run the periodic `evict`) later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from smg.pipeline.kv_index import KvIndex, KvIndexes
from smg.pipeline.policies.base import Candidate, RouteRequest, least_loaded
from smg.pipeline.prefix_hints import PrefixHints
from smg.pipeline.radix_eviction import Eviction
from smg.pipeline.radix_tree import RadixTree

RECENT_PER_WORKER = 64  # prefixes remembered per worker for the mesh's cache summaries
RECENT_ITEMS = 256  # items (characters or token ids) kept of each
DEFAULT_MAX_TREE_BYTES = 64 * 1024 * 1024  # --max-tree-bytes
EVICT_ABOVE = 0.9  # share of the byte cap past which an eviction pass is asked for at once ...
EVICT_TO = 0.75  # ... which takes the trees back to this share (least recently used first)
TENANT_SLACK = 1.1  # a worker this far past --max-tree-size asks for a pass (which takes it to
# the bound): one pass per 10% of growth, not one per insert


class CacheAwareState:
    """The prefix trees, one per model (requests without a model share the tree named ""), and
    per worker the last few routed prefixes (the mesh publishes their hashes so that another
    node can start warm), and the hints learned from other nodes.

    Bounded in bytes at all times (issue 10, finding 15: the trees kept whole prompts, bounded
    only per worker and only by the periodic eviction): all trees together hold at most
    `max_bytes` (their estimated `total_bytes`, see `smg.pipeline.radix_tree`), because an insert
    that could pass it is not recorded (`skipped` counts them: such a request still routes, its
    prefix just leaves no trace). Past `EVICT_ABOVE` of the cap, or when an insert takes a
    worker 10% past `max_size_per_tenant` elements in a tree, `on_pressure` is called, once until
    the next eviction pass ends: the cache-index actor runs that pass at once, in slices, and it
    takes the bytes back to `EVICT_TO` of the cap (each tree in proportion, least recently used
    leaves first, whatever their worker) and every worker under its element bound.
    """

    __slots__ = (
        "_pressed",
        "_recent",
        "_trees",
        "hints",
        "max_bytes",
        "max_size_per_tenant",
        "on_pressure",
        "skipped",
    )

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_TREE_BYTES, max_size_per_tenant: int = 1 << 62
    ) -> None:
        self._trees: dict[str, RadixTree] = {}
        self._recent: dict[str, deque[str | tuple[int, ...]]] = {}
        self.hints = PrefixHints()
        self.max_bytes = max_bytes
        self.max_size_per_tenant = max_size_per_tenant
        self.on_pressure: Callable[[], None] | None = None
        self._pressed = False
        self.skipped = 0

    def note(self, worker_id: str, key: str | Sequence[int]) -> None:
        recent = self._recent.get(worker_id)
        if recent is None:
            recent = self._recent[worker_id] = deque(maxlen=RECENT_PER_WORKER)
        recent.append(key[:RECENT_ITEMS] if isinstance(key, str) else tuple(key[:RECENT_ITEMS]))

    def recent(self, worker_id: str) -> list[str | tuple[int, ...]]:
        """Newest first, without repeats."""
        return list(dict.fromkeys(reversed(self._recent.get(worker_id, ()))))

    def seed(
        self, model: str, worker_id: str, keys: Sequence[str | Sequence[int]], now: float
    ) -> None:
        """Warm a worker's share of `model`'s tree with prefixes learned elsewhere."""
        tree = self.tree(model)
        for key in keys:
            if key:
                self.insert(tree, key, worker_id, now)

    def tree(self, model: str) -> RadixTree:
        """The tree of `model`, created empty on first use."""
        tree = self._trees.get(model)
        if tree is None:
            tree = self._trees[model] = RadixTree()
        return tree

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._trees)

    # --- the bounds ------------------------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        """The estimated memory of every tree."""
        trees = self._trees
        if len(trees) == 1:  # the common case, on every request
            for tree in trees.values():
                return tree.total_bytes
        return sum(tree.total_bytes for tree in trees.values())

    def insert(self, tree: RadixTree, key: str | Sequence[int], worker_id: str, now: float) -> bool:
        """Record that `worker_id` holds `key` in `tree` (one of ours) unless that could take the
        trees past `max_bytes`; whether it was recorded."""
        total = self.total_bytes
        if total + tree.insert_bound(key) > self.max_bytes:
            self.skipped += 1
            self._press()
            return False
        before = tree.total_bytes
        tree.insert(key, worker_id, now)
        if (
            total + tree.total_bytes - before > self.max_bytes * EVICT_ABOVE
            or tree.tenant_size(worker_id) > self.max_size_per_tenant * TENANT_SLACK
        ):
            self._press()
        return True

    def _press(self) -> None:
        if not self._pressed:
            self._pressed = True
            if self.on_pressure is not None:
                self.on_pressure()

    def byte_target(self) -> int | None:
        """Where an eviction pass should take the trees' bytes; None when they are within."""
        if self.total_bytes > self.max_bytes * EVICT_ABOVE:
            return int(self.max_bytes * EVICT_TO)
        return None

    def evict(self, max_size_per_tenant: int) -> int:
        """LRU-evict every tree so no worker holds more than the bound, and the trees are within
        their byte target; returns elements freed (`begin_evict`, at once)."""
        job = self.begin_evict(max_size_per_tenant)
        while not job.step(1 << 62):
            pass
        return job.freed

    def begin_evict(self, max_size_per_tenant: int) -> StateEviction:
        """The same as `evict`, as a job run in bounded steps (see `StateEviction`)."""
        return StateEviction(self, max_size_per_tenant)

    def drop_if_empty(self, model: str, tree: RadixTree) -> None:
        if tree.node_count == 0 and self._trees.get(model) is tree:
            del self._trees[model]

    def remove_tenant(self, worker_id: str) -> None:
        self._recent.pop(worker_id, None)
        self.hints.forget(worker_id)
        for model, tree in list(self._trees.items()):
            tree.remove_tenant(worker_id)
            if tree.node_count == 0:
                del self._trees[model]


class StateEviction:
    """An eviction pass over every model's tree, one `radix_tree.Eviction` after another.

    `step(budget)` works on one tree for at most `budget` units and returns True once every tree
    is done; trees left empty are dropped. Trees created after the job began wait for the next
    pass. The trees stay usable between steps.
    """

    __slots__ = ("_bound", "_current", "_models", "_ratio", "_state", "freed")

    def __init__(self, state: CacheAwareState, max_size_per_tenant: int) -> None:
        self._state = state
        self._bound = max_size_per_tenant
        self._models = list(reversed(state.models))
        self._current: tuple[str, RadixTree, Eviction] | None = None
        target = state.byte_target()
        # the byte target, shared by the trees in proportion to their size
        self._ratio = None if target is None else target / max(1, state.total_bytes)
        self.freed = 0

    def step(self, budget: int) -> bool:
        while self._current is None:
            if not self._models:
                self._state._pressed = False  # the next insert over a bound asks again
                return True
            model = self._models.pop()
            tree = self._state._trees.get(model)
            if tree is not None:
                ratio = self._ratio
                max_bytes = None if ratio is None else int(tree.total_bytes * ratio)
                self._current = (model, tree, Eviction(tree, self._bound, max_bytes))
        model, tree, job = self._current
        before = job.freed
        finished = job.step(budget)
        self.freed += job.freed - before
        if finished:
            self._state.drop_if_empty(model, tree)
            self._current = None
        if finished and not self._models:
            self._state._pressed = False
            return True
        return False


class CacheAwarePolicy:
    __slots__ = ("_abs", "_now", "_rel", "_state", "_threshold", "kv_index")

    name = "cache_aware"

    def __init__(
        self,
        *,
        cache_threshold: float,
        balance_abs_threshold: int,
        balance_rel_threshold: float,
        now: Callable[[], float],
        state: CacheAwareState | None = None,
        kv_index: KvIndexes | None = None,
        max_tree_bytes: int = DEFAULT_MAX_TREE_BYTES,
        max_tree_size: int = 1 << 62,
    ) -> None:
        self.kv_index = kv_index  # settable after construction: the KV-events actor owns it
        self._threshold = cache_threshold
        self._abs = balance_abs_threshold
        self._rel = balance_rel_threshold
        self._now = now
        self._state = CacheAwareState(max_tree_bytes, max_tree_size) if state is None else state

    @property
    def state(self) -> CacheAwareState:
        return self._state

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        tokens = request.tokens
        key: str | Sequence[int] | None = (
            tokens if tokens is not None and len(tokens) else request.text
        )
        if not key:
            return least_loaded(candidates)
        loads = [c.load for c in candidates]
        min_load, max_load = min(loads), max(loads)
        ids = [c.worker_id for c in candidates]
        tree = self._state.tree(request.model or "")
        if max_load - min_load > self._abs and max_load > min_load * self._rel:
            choice = loads.index(min_load)
        else:
            kv = self._kv(request)
            if kv is not None and tokens is not None:
                share, holders = self._kv_match(kv, tree, ids, tokens)
            else:
                match = tree.match(key, among=frozenset(ids))
                share, holders = match.matched / len(key), set(match.tenants)
            if share <= self._threshold and self._state.hints:
                share, holders = self._hinted(request.model or "", key, ids, share, holders)
            if share > self._threshold:
                choice = min((i for i in range(n) if ids[i] in holders), key=loads.__getitem__)
            else:
                size = tree.tenant_size
                room = [(size(wid), load) for wid, load in zip(ids, loads, strict=True)]
                choice = room.index(min(room))
        self._state.insert(tree, key, ids[choice], self._now())
        self._state.note(ids[choice], key)
        return choice

    def _hinted(
        self,
        model: str,
        key: str | Sequence[int],
        ids: list[str],
        share: float,
        holders: set[str],
    ) -> tuple[float, set[str]]:
        """The tree's match, or the longest prefix other nodes routed, if that is longer."""
        matched, hinted = self._state.hints.match(model, key, ids)
        if matched / len(key) > share:
            return matched / len(key), hinted
        return share, holders

    def _kv(self, request: RouteRequest) -> KvIndex | None:
        if self.kv_index is None or not request.tokens:
            return None
        return self.kv_index.get(request.model or "")

    @staticmethod
    def _kv_match(
        kv: KvIndex, tree: RadixTree, ids: list[str], tokens: Sequence[int]
    ) -> tuple[float, set[str]]:
        """The best cached share of `tokens` and who holds it: KV blocks for the workers whose
        index is authoritative, the tree for the rest."""
        n = len(tokens)
        counts = kv.match(ids, tokens)
        share = 0.0
        holders: set[str] = set()
        top = max(counts.values(), default=0)
        if top and kv.block_size:
            share = top * kv.block_size / n
            holders = {wid for wid, c in counts.items() if c == top}
        rest = [wid for wid in ids if wid not in counts]
        if rest:
            match = tree.match(tokens, among=frozenset(rest))
            tree_share = match.matched / n
            if tree_share > share:
                share, holders = tree_share, set(match.tenants)
            elif tree_share == share and share > 0:
                holders.update(match.tenants)
        return share, holders

    def evict(self, max_tree_size: int) -> int:
        """Bound every worker's share of each model's tree; for the periodic eviction loop."""
        return self._state.evict(max_tree_size)

    def begin_evict(self, max_tree_size: int) -> StateEviction:
        """`evict` as a job the cache-index actor runs in slices, yielding in between."""
        return self._state.begin_evict(max_tree_size)

    def on_worker_removed(self, worker_id: str) -> None:
        self._state.remove_tenant(worker_id)
