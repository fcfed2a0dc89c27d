"""The cache-aware routing state: the prefix trees (one per model), their bounds, their eviction.

A pure core (no clock, no IO): `smg.pipeline.policies.cache_aware` reads it to route, and its
owner (the cache-index actor in the gateway, or a policy built alone) records the routing
decisions into it, evicts it and forgets removed workers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

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
    worker 10% past `max_size_per_tenant` elements in a tree, `take_pressure()` answers True, once
    until the next eviction pass ends: the cache-index actor asks after every batch it records and
    runs that pass at once, in slices; it takes the bytes back to `EVICT_TO` of the cap (each tree
    in proportion, least recently used leaves first, whatever their worker) and every worker under
    its element bound.
    """

    __slots__ = (
        "_pressed",
        "_pressure",
        "_recent",
        "_trees",
        "hints",
        "max_bytes",
        "max_size_per_tenant",
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
        self._pressed = False  # a bound was crossed; cleared when an eviction pass ends
        self._pressure = False  # ... and nobody took the news yet
        self.skipped = 0

    def record(self, model: str, key: str | Sequence[int], worker_id: str, now: float) -> bool:
        """`worker_id` was chosen for `key` of `model`: insert it into the tree (within the
        bounds) and remember it for the mesh's summaries; whether the tree took it."""
        recorded = self.insert(self.tree(model), key, worker_id, now)
        self.note(worker_id, key)
        return recorded

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
        """The tree of `model`, created empty on first use (for the owner)."""
        tree = self._trees.get(model)
        if tree is None:
            tree = self._trees[model] = RadixTree()
        return tree

    def find(self, model: str) -> RadixTree:
        """The tree of `model` to read, without creating it (an empty one when there is none);
        never insert into what this returns."""
        return self._trees.get(model, _EMPTY)

    def tenants(self) -> set[str]:
        """Every worker the state remembers anything of."""
        out = set(self._recent) | self.hints.workers()
        for tree in self._trees.values():
            out.update(tree.tenant_sizes())
        return out

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
            self._pressure = True

    def take_pressure(self) -> bool:
        """Whether a bound was crossed since the last call: True at most once per eviction pass
        (the owner should run one now)."""
        pressure, self._pressure = self._pressure, False
        return pressure

    def rearm_pressure(self) -> None:
        """An owner starting afresh: forget a pass a crashed predecessor never finished."""
        self._pressed = self._pressure = False

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


_EMPTY = RadixTree()  # what `CacheAwareState.find` reads for a model with no tree yet
