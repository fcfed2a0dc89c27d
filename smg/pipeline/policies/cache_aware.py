"""Cache-aware routing: send a request where its prefix is likely still in the KV cache.

Each model has a `RadixTree` whose tenants are worker ids; a worker "holds" a prefix when a request
with that prefix was routed to it. For each request (keyed on its token ids when given, else its
text):

1. Loads are read once. If the system is imbalanced (`max - min > balance_abs_threshold` and
   `max > min * balance_rel_threshold`), the least-loaded candidate wins, cache or not.
2. Otherwise the key is matched against what the candidates hold. If the matched share
   (`matched / len(key)`) is above `cache_threshold`, the least-loaded candidate among those
   holding that longest prefix wins; else the candidate holding the least (most cache room) wins,
   ties to the lower load, or, with `hash_misses`, the candidate the key's opening hashes to
   (rendezvous hashing, `smg.pipeline.policies.rendezvous`).
3. Either way the key is inserted into the tree for the winner, at `now()`.

A request with no text and no tokens goes to the least-loaded candidate and leaves the tree alone.

With a `kv_index` (the engines' KV events, see `smg.pipeline.kv_index`) and token ids, step 2
scores each candidate whose index is authoritative by its run of consecutive cached blocks
(`blocks * block_size / len(tokens)`); the others are scored by the tree as above. The highest
share wins the same way (least-loaded among those holding it, if above `cache_threshold`). The
tree is still updated for every winner, so it is warm when a worker's stream falls back to it.

When the tree's best share is not above `cache_threshold` and other mesh nodes published hints
(hashes of the prefixes they routed, see `smg.pipeline.prefix_hints`), the longest hinted prefix
among the candidates counts as the match instead, if it is longer (as a share of the part hints
cover, the key's first `HINTED_ITEMS` items): a node that just joined routes like the others did.

`hash_misses` is for routers that share their workers with others (`--workers N` processes, mesh
nodes): a tree learns of the other routers' decisions only through the mesh's summaries, a second
or more later, so "most cache room" (each router's own tree) sent a new conversation's requests to
different engines depending on which router took them. The hash depends on nothing a router holds
alone, so all agree at once. A single router keeps the Rust gateway's "most cache room".

Unlike the Rust gateway, the match only counts routable candidates: a prefix held by a worker that
is down must not pin requests to nobody.

The trees live in a `CacheAwareState`, and who owns it is the caller's choice. In the gateway the
cache-index actor does (`smg.actors.cache_index`): the policy only reads the state, and hands its
decisions ("worker w now holds key k") to a `Recorder`, a lane the actor drains in batches. A
policy built alone owns its own state and records into it at once (`DirectRecorder`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from smg.pipeline.cache_state import (
    DEFAULT_MAX_TREE_BYTES,
    EVICT_ABOVE,
    EVICT_TO,
    RECENT_ITEMS,
    RECENT_PER_WORKER,
    TENANT_SLACK,
    CacheAwareState,
    StateEviction,
)
from smg.pipeline.kv_index import KvIndex, KvIndexes
from smg.pipeline.policies.base import Candidate, RouteRequest, least_loaded
from smg.pipeline.policies.rendezvous import pick, window_digest
from smg.pipeline.prefix_hints import HINTED_ITEMS
from smg.pipeline.radix_tree import RadixTree

__all__ = [
    "DEFAULT_MAX_TREE_BYTES",
    "EVICT_ABOVE",
    "EVICT_TO",
    "RECENT_ITEMS",
    "RECENT_PER_WORKER",
    "TENANT_SLACK",
    "CacheAwarePolicy",
    "CacheAwareState",
    "DirectRecorder",
    "Recorder",
    "StateEviction",
]


class Recorder(Protocol):
    """Where the policy's decisions go: the state's owner applies them."""

    def record(self, model: str, key: str | Sequence[int], worker_id: str, now: float) -> None: ...


class DirectRecorder:
    """A policy that owns its state records into it at once."""

    __slots__ = ("record",)

    def __init__(self, state: CacheAwareState) -> None:
        self.record = state.record


class CacheAwarePolicy:
    __slots__ = (
        "_abs",
        "_hash_misses",
        "_now",
        "_owns_state",
        "_record",
        "_rel",
        "_state",
        "_threshold",
        "kv_index",
    )

    name = "cache_aware"

    def __init__(
        self,
        *,
        cache_threshold: float,
        balance_abs_threshold: int,
        balance_rel_threshold: float,
        now: Callable[[], float],
        state: CacheAwareState | None = None,
        recorder: Recorder | None = None,
        kv_index: KvIndexes | None = None,
        max_tree_bytes: int = DEFAULT_MAX_TREE_BYTES,
        max_tree_size: int = 1 << 62,
        hash_misses: bool = False,
    ) -> None:
        """With `recorder`, `state` belongs to whoever drains the recorder (the cache-index
        actor): the policy only reads it. Without, the policy owns `state` (or a new one).
        `hash_misses`: a key with no good match goes where its opening hashes (other routers
        share these workers), not to the candidate with the most cache room."""
        self._hash_misses = hash_misses
        self.kv_index = kv_index  # settable after construction: the KV-events actor owns it
        self._threshold = cache_threshold
        self._abs = balance_abs_threshold
        self._rel = balance_rel_threshold
        self._now = now
        self._state = CacheAwareState(max_tree_bytes, max_tree_size) if state is None else state
        self._owns_state = recorder is None
        self._record = (DirectRecorder(self._state) if recorder is None else recorder).record

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
        model = request.model or ""
        tree = self._state.find(model)
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
                share, holders = self._hinted(model, key, ids, share, holders)
            if share > self._threshold:
                choice = min((i for i in range(n) if ids[i] in holders), key=loads.__getitem__)
            else:
                choice = self._miss(key, candidates, ids, loads, tree)
        self._record(model, key, ids[choice], self._now())
        return choice

    def _miss(
        self,
        key: str | Sequence[int],
        candidates: Sequence[Candidate],
        ids: list[str],
        loads: list[int],
        tree: RadixTree,
    ) -> int:
        """A key no candidate holds enough of: where its opening hashes (`hash_misses`), else
        the candidate holding the least (most cache room), ties to the lower load."""
        if self._hash_misses:
            digest = window_digest(key)
            if digest is not None:
                return pick(digest, [c.url for c in candidates])
        size = tree.tenant_size
        room = [(size(wid), load) for wid, load in zip(ids, loads, strict=True)]
        return room.index(min(room))

    def _hinted(
        self,
        model: str,
        key: str | Sequence[int],
        ids: list[str],
        share: float,
        holders: set[str],
    ) -> tuple[float, set[str]]:
        """The tree's match, or the longest prefix other nodes routed, if that is longer.

        Hints cover at most a key's first `HINTED_ITEMS` items (what nodes publish of each
        prefix), so their share is of that: measured against a whole long prompt they could
        never pass the threshold (a 3,000-character chat: 256 / 3,000), and a node learned
        nothing from the others' summaries."""
        matched, hinted = self._state.hints.match(model, key, ids)
        hinted_share = matched / min(len(key), HINTED_ITEMS)
        if hinted_share > share:
            return hinted_share, hinted
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

    def on_worker_removed(self, worker_id: str) -> None:
        """Forget the worker in the state this policy owns. A state someone else owns (the
        cache-index actor) is its owner's to change: it hears of every removal itself."""
        if self._owns_state:
            self._state.remove_tenant(worker_id)
