"""Which worker holds which KV blocks, from the engines' KV-event streams (sans-IO).

One `KvIndex` per model. A block is keyed by its *content chain*: `hash((parent_key, token ids))`
chained from `ROOT_KEY`, so a key names the block's tokens and every token before it (its
position included). Engine block hashes are only used to find a stored block's parent and to
resolve `removed` events, per worker: they are never compared across engines. Python's hash of a
tuple of ints is not salted, costs ~0.4 us per 16-token block (blake2b-8 costs ~1.7 us) and is
only ever compared within this process.

`match(workers, tokens)` hashes the request's full blocks from the start and stops as soon as
no candidate holds the next one: O(matched prefix blocks), not O(prompt).

Per worker, a small sequence state machine decides what a batch means (`apply_batch`). Every
stream is a rebuild: a new stream cannot prove it continues the old one (a restarted engine
numbers from 1 again, and may already have published what a resumed cursor would skip), so
entries are dropped whenever a stream ends, fails or skips, and the shell subscribes again from
`REPLAY_FROM` (1: whatever history the engine keeps).

* `open_stream`: a new subscription; the worker is not authoritative until its first batch.
* first batch of a stream: applies whatever its number; the worker is authoritative from here
  on, `complete` when the replay started at 1 (else the history no longer reached back: blocks
  whose parent is older are missing, so matches under-report).
* mid-stream: `seq == last + 1` applies; `seq == last` is a duplicate (skipped); `seq < last`
  means the publisher started over (a restart behind a relay): RESET, the batch applies to an
  empty worker; `seq > last + 1` is a GAP: entries dropped, not authoritative, resubscribe.
* `mark_stale` (the stream ended or failed): entries dropped, not authoritative.
* snapshot chunks (`KvSnapshotChunk`): chunk 0 resets; authoritative after the last chunk.
* load-only batches (no events, `load.load_only`) never move the cursor.

While a worker is not authoritative, `match` leaves it out so the router uses its approximate
tree for it. Memory is bounded: at most `max_blocks_per_worker` engine blocks per worker, the
oldest dropped first (a hole only shortens later matches: the index under-reports, never
over-reports).

Blocks stored under a LoRA adapter or cache salt, or marked remote, are not indexed: a plain
request's tokens cannot hit them. A worker whose block size differs from the model's (learned
from the first stored block) is marked incompatible and never authoritative.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

REPLAY_FROM = 1  # `start_sequence_number` of every subscription: the engine's whole history
ROOT_KEY = 0x5D6_C0DE  # the chain's seed: the "parent" of a first block
DEFAULT_MAX_BLOCKS_PER_WORKER = 1 << 20  # ~16M tokens of KV at 16-token blocks
_LOCALITY_REMOTE = 2  # common_pb2.KV_CACHE_LOCALITY_REMOTE


class Verdict(enum.Enum):
    APPLIED = "applied"  # in order (or a load-only batch)
    DUPLICATE = "duplicate"  # already applied: skipped
    GAP = "gap"  # sequences missing mid-stream: nothing applied, resubscribe
    RESET = "reset"  # history lost or the engine restarted: entries dropped, then applied


class _Worker:
    __slots__ = (
        "authoritative",
        "blocks",
        "complete",
        "fresh",
        "incompatible",
        "last_seq",
        "refs",
        "snapshot",
    )

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}  # engine hash -> content key (insertion order: FIFO)
        self.refs: dict[int, int] = {}  # content key -> engine blocks holding it
        self.last_seq = 0
        self.fresh = True  # the next batch is the first of a stream
        self.authoritative = False
        self.complete = False  # the entries cover the engine's whole cache
        self.incompatible = False  # block size differs from the model's
        self.snapshot = False  # inside a snapshot's chunks


class KvIndex:
    """One model's block-holders index; see the module docstring."""

    __slots__ = ("_holders", "_max", "_workers", "block_size", "dropped_total", "evicted_total")

    def __init__(self, max_blocks_per_worker: int = DEFAULT_MAX_BLOCKS_PER_WORKER) -> None:
        if max_blocks_per_worker < 1:
            raise ValueError("max_blocks_per_worker must be >= 1")
        self._max = max_blocks_per_worker
        self._workers: dict[str, _Worker] = {}
        self._holders: dict[int, set[str]] = {}  # content key -> workers holding it
        self.block_size: int | None = None
        self.dropped_total = 0  # stored blocks not indexed (unknown parent, wrong size)
        self.evicted_total = 0  # blocks dropped to respect the per-worker cap

    # ------------------------------------------------------------------ reading (hot path)

    def authoritative(self, worker_id: str) -> bool:
        w = self._workers.get(worker_id)
        return w is not None and w.authoritative and not w.incompatible

    def match(self, worker_ids: Iterable[str], tokens: Sequence[int]) -> dict[str, int]:
        """Consecutive cached blocks from the start of `tokens`, for each authoritative worker
        among `worker_ids` (the others are left out)."""
        out = {wid: 0 for wid in worker_ids if self.authoritative(wid)}
        bs = self.block_size
        if not out or not bs:
            return out
        alive = set(out)
        key = ROOT_KEY
        holders_of = self._holders.get
        n = 0
        for start in range(0, len(tokens) - bs + 1, bs):
            key = hash((key, tuple(tokens[start : start + bs])))
            holders = holders_of(key)
            if not holders:
                break
            if not alive <= holders:  # someone's run ends here
                still = alive & holders
                for wid in alive - still:
                    out[wid] = n
                alive = still
                if not alive:
                    break
            n += 1
        for wid in alive:
            out[wid] = n
        return out

    def size(self, worker_id: str) -> int:
        w = self._workers.get(worker_id)
        return len(w.blocks) if w is not None else 0

    def sizes(self) -> dict[str, int]:
        """Indexed engine blocks per worker."""
        return {wid: len(w.blocks) for wid, w in self._workers.items()}

    @property
    def total_blocks(self) -> int:
        return sum(len(w.blocks) for w in self._workers.values())

    @property
    def distinct_blocks(self) -> int:
        return len(self._holders)

    def status(self, worker_id: str) -> dict[str, Any]:
        w = self._workers.get(worker_id)
        if w is None:
            return {"known": False}
        return {
            "known": True,
            "authoritative": w.authoritative and not w.incompatible,
            "complete": w.complete,
            "incompatible": w.incompatible,
            "last_seq": w.last_seq,
            "blocks": len(w.blocks),
        }

    # ------------------------------------------------------------------ stream bookkeeping

    def open_stream(self, worker_id: str) -> None:
        """A new subscription starts: the worker is rebuilt from its first batch."""
        w = self._worker(worker_id)
        self._reset(worker_id, w)
        w.fresh = True

    def mark_stale(self, worker_id: str) -> None:
        """The stream ended or failed: drop the worker's entries and stop routing on it."""
        w = self._workers.get(worker_id)
        if w is not None:
            self._reset(worker_id, w)

    def forget(self, worker_id: str) -> None:
        """The worker left: drop its entries and state."""
        w = self._workers.pop(worker_id, None)
        if w is not None:
            self._drop_entries(worker_id, w)

    def apply_batch(self, worker_id: str, batch: Any) -> Verdict:
        """Apply one `KvEventBatch` (a proto message or anything shaped like one)."""
        w = self._worker(worker_id)
        seq = int(batch.sequence_number)
        events = batch.events
        snap = batch.snapshot if batch.HasField("snapshot") else None
        if not events and snap is None:  # load-only or empty: the cursor does not move
            return Verdict.APPLIED
        verdict = Verdict.APPLIED
        if snap is not None:
            if snap.index == 0:
                self._reset(worker_id, w)
                w.snapshot = True
                verdict = Verdict.RESET
            elif not w.snapshot or seq != w.last_seq + 1:
                self._reset(worker_id, w)
                return Verdict.GAP
        elif w.fresh:
            self._reset(worker_id, w)
            w.complete = seq <= REPLAY_FROM
        elif seq == w.last_seq:
            return Verdict.DUPLICATE
        elif seq < w.last_seq:  # the publisher started over
            self._reset(worker_id, w)
            w.complete = seq <= REPLAY_FROM
            verdict = Verdict.RESET
        elif seq != w.last_seq + 1:
            self._reset(worker_id, w)
            return Verdict.GAP
        w.fresh = False
        w.last_seq = seq
        for event in events:
            self.apply(worker_id, event)
        if snap is not None:
            if snap.index + 1 >= snap.count:
                w.snapshot = False
                w.complete = not snap.unknown_before
                w.authoritative = True
        elif not w.snapshot:
            w.authoritative = True
        return verdict

    # ------------------------------------------------------------------ events

    def apply(self, worker_id: str, event: Any) -> None:
        """Apply one `KvCacheEvent` to `worker_id`'s entries (no sequence checks)."""
        w = self._worker(worker_id)
        kind = event.WhichOneof("data")
        if kind == "stored":
            self._stored(worker_id, w, event.stored)
        elif kind == "removed":
            for engine_hash in event.removed.block_hashes:
                self._remove(worker_id, w, int(engine_hash))
        elif kind == "cleared":
            self._drop_entries(worker_id, w)
            w.complete = True

    def _stored(self, worker_id: str, w: _Worker, stored: Any) -> None:
        blocks = stored.blocks
        if not blocks:
            return
        if (
            stored.lora_name
            or stored.cache_salt
            or (stored.HasField("locality") and stored.locality == _LOCALITY_REMOTE)
        ):
            return
        parent_key = ROOT_KEY
        if stored.HasField("parent_block_hash"):
            found = w.blocks.get(int(stored.parent_block_hash))
            if found is None:  # parent never seen (or evicted): the chain cannot be placed
                self.dropped_total += len(blocks)
                return
            parent_key = found
        for block in blocks:
            tokens = block.token_ids
            size = int(block.block_size) or len(tokens)
            if self.block_size is None:
                self.block_size = size
            if size != self.block_size:
                w.incompatible = True
                self.dropped_total += 1
                return
            if len(tokens) != size:  # a partial block is not a cache hit for a prefix
                self.dropped_total += 1
                return
            parent_key = hash((parent_key, tuple(tokens)))
            self._add(worker_id, w, int(block.block_hash), parent_key)

    def _add(self, worker_id: str, w: _Worker, engine_hash: int, key: int) -> None:
        old = w.blocks.get(engine_hash)
        if old == key:
            return
        if old is not None:
            self._remove(worker_id, w, engine_hash)
        while len(w.blocks) >= self._max:
            oldest = next(iter(w.blocks))
            self._remove(worker_id, w, oldest)
            self.evicted_total += 1
        w.blocks[engine_hash] = key
        count = w.refs.get(key, 0)
        w.refs[key] = count + 1
        if count == 0:
            holders = self._holders.get(key)
            if holders is None:
                self._holders[key] = {worker_id}
            else:
                holders.add(worker_id)

    def _remove(self, worker_id: str, w: _Worker, engine_hash: int) -> None:
        key = w.blocks.pop(engine_hash, None)
        if key is None:
            return
        count = w.refs[key] - 1
        if count:
            w.refs[key] = count
            return
        del w.refs[key]
        holders = self._holders.get(key)
        if holders is not None:
            holders.discard(worker_id)
            if not holders:
                del self._holders[key]

    # ------------------------------------------------------------------ helpers

    def _worker(self, worker_id: str) -> _Worker:
        w = self._workers.get(worker_id)
        if w is None:
            w = self._workers[worker_id] = _Worker()
        return w

    def _reset(self, worker_id: str, w: _Worker) -> None:
        """Drop the entries; not authoritative until a batch rebuilds them."""
        self._drop_entries(worker_id, w)
        w.authoritative = False
        w.snapshot = False
        w.complete = False
        w.incompatible = False

    def _drop_entries(self, worker_id: str, w: _Worker) -> None:
        holders_of = self._holders.get
        for key in w.refs:
            holders = holders_of(key)
            if holders is not None:
                holders.discard(worker_id)
                if not holders:
                    del self._holders[key]
        w.blocks.clear()
        w.refs.clear()


class KvIndexes:
    """The per-model indexes; the policy reads `get(model)`, the events actor writes."""

    __slots__ = ("_by_model", "_max")

    def __init__(self, max_blocks_per_worker: int = DEFAULT_MAX_BLOCKS_PER_WORKER) -> None:
        self._max = max_blocks_per_worker
        self._by_model: dict[str, KvIndex] = {}

    def get(self, model: str) -> KvIndex | None:
        return self._by_model.get(model)

    def for_model(self, model: str) -> KvIndex:
        index = self._by_model.get(model)
        if index is None:
            index = self._by_model[model] = KvIndex(self._max)
        return index

    def forget(self, worker_id: str) -> None:
        for index in self._by_model.values():
            index.forget(worker_id)

    def sizes(self) -> dict[str, dict[str, int]]:
        """Model -> worker -> indexed blocks."""
        return {model: index.sizes() for model, index in self._by_model.items()}
