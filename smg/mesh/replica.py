"""One replicated namespace: a pycrdt Doc holding one Map, wrapped as a pure core.

Disciplines (each answers a measured pycrdt behaviour):

* **One writer per key, enforced.** Keys are ``f"{owner}/{subkey}"`` and only ``owner`` writes
  them, so pycrdt's client-id tie-break for concurrent writes never decides anything. Every value
  is signed by its owner and every peer's update is checked before it is applied (ownership.py):
  a write to someone else's key, or a value that fails the namespace's validator, rejects the
  whole update (`RejectedUpdate`, with a reason for the metric).
* **Fresh client id per doc**, derived from this boot's key pair, the namespace and the
  generation (identity.py): reusing a client id after a restart silently loses writes, and a
  derived id also names its owner.
* **Values are msgpack bytes** inside a signed envelope: pycrdt would turn small ints into floats.
* **Deletes are tombstones**: an owner deletes a key by writing an empty signed value (a Yjs
  delete is unsigned, so peers refuse it). Readers do not see tombstoned keys.
* **Bounded tombstones by generation.** Overwriting one key again and again costs nothing (the
  deleted items squash into one range), but interleaved overwrites of many keys cost ~6 B each
  and every deleted key leaves ~13 B + its name forever. ``compact()`` starts a fresh doc.

Generation rule (what makes compaction lose no write of a live owner):

1. Every byte string this module hands out or accepts (delta, diff, state vector) is an envelope
   ``msgpack([generation, payload])`` (`encode_update` / `decode_update`).
2. ``compact()`` moves to ``generation + 1``: a fresh doc holding only this node's own items plus
   its generation marker (key ``f"{owner}/"``).
3. A node that receives an update of a higher generation carrying at least one validly signed
   item of that generation adopts it the same way: fresh doc, fresh client id, re-put of its *own*
   items (the owner's intent is kept outside the doc, so nothing it wrote is lost), then merges
   the update. Payloads of a lower generation are ignored (``apply`` returns False); ``diff``
   answers them with the full state of the newer generation so the laggard adopts it. A state
   vector of a higher generation is not signed, so ``diff`` answers it with None (the caller asks
   that peer for its state instead) rather than adopting on its word.
4. Only owners re-put. Until an owner's marker shows up in the new generation, readers keep seeing
   that owner's items from the previous generation (the *fallback*), so a compaction causes no
   visible blip. Items of owners that never come back (dead nodes) stay visible from the fallback
   until ``release_previous()``; after that they are gone. Layers that must keep a dead node's
   items (the worker registry) copy them under their own prefix first (see worker_records.py).
5. Concurrent compactions to the same generation merge like any other writes (disjoint owners).

An update that depends on items not held yet (it overtook its predecessor) is kept, bounded, and
retried after the next update that applies; anti-entropy repairs whatever is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from pycrdt import Doc, Map, merge_updates

from smg.mesh import ownership
from smg.mesh import yupdate as y
from smg.mesh.doc_wire import (
    RejectedUpdate,
    ReplicaError,
    decode_update,
    encode_update,
    unpack,
)
from smg.mesh.identity import NodeIdentity, payload_of
from smg.mesh.ownership import ItemIndex, Validator, owner_of, pack
from smg.mesh.replica_view import ReplicaView

__all__ = [
    "RejectedUpdate",
    "Replica",
    "ReplicaError",
    "decode_update",
    "encode_update",
    "owner_of",
    "pack",
    "unpack",
]

MAX_DEFERRED = 16
MAX_DEFERRED_BYTES = 4 * 1024 * 1024


def _is_marker(key: str) -> bool:
    return key.endswith("/") and key.count("/") == 1


class Replica(ReplicaView):
    """One namespace, one Map. Not thread-safe; owned by one actor."""

    def __init__(
        self, namespace: str, identity: NodeIdentity, validate: Validator | None = None
    ) -> None:
        owner = identity.node_id
        if not owner or "/" in owner:
            raise ValueError(f"owner must be non-empty and contain no '/': {owner!r}")
        self.namespace = namespace
        self.identity = identity
        self.owner = owner
        self.validate = validate
        self.generation = 0
        super().__init__()
        self._own: dict[str, bytes] = {}  # subkey -> packed value: the owner's intent
        self._previous: dict[str, dict[str, bytes]] = {}  # owner -> key -> packed (fallback)
        self._deferred: deque[bytes] = deque()
        self._new_doc()

    # --- doc lifecycle ---------------------------------------------------------------------
    def _new_doc(self) -> None:
        self.client_id = self.identity.client_id(self.namespace, self.generation)
        self._doc: Doc = Doc(client_id=self.client_id)
        self._map: Map = self._doc.get(y.ROOT, type=Map)
        self._index = ItemIndex()
        self._index.owners[self.client_id] = self.owner
        self._clock = 0  # our client's next Yjs clock: each map write is one item
        self._pending: list[bytes] = []
        self._local = False
        self._dirty = False
        self._doc.observe(self._on_txn)
        self._map.observe(self._on_map)

    def _on_txn(self, event: Any) -> None:
        if self._local:
            self._pending.append(bytes(event.update))

    def _on_map(self, _event: Any) -> None:
        self._dirty = True

    def _write(self, sets: dict[str, bytes]) -> None:
        """Sign and write full key -> payload (b"" is a tombstone)."""
        self._local = True
        try:
            with self._doc.transaction():
                for key, payload in sets.items():
                    clock = self._clock
                    self._map[key] = self.identity.seal_value(
                        self.namespace, self.generation, self.client_id, clock, key, payload
                    )
                    self._index.add(self.client_id, clock, 1, key)
                    self._clock += 1
        finally:
            self._local = False

    def _adopt(self, generation: int) -> None:
        prev: dict[str, dict[str, bytes]] = {}
        for key, raw in self._view.items():
            o = owner_of(key)
            if o != self.owner:
                prev.setdefault(o, {})[key] = raw
        self._previous = prev
        self.generation = generation
        self._new_doc()
        own = {f"{self.owner}/{s}": v for s, v in self._own.items()}
        self._write({f"{self.owner}/": pack(generation), **own})
        self._refresh()

    def _refresh(self) -> bool:
        """Recompute the visible view; bump `version` and return True if it changed."""
        current: dict[str, bytes] = {}
        present: set[str] = set()
        for key, value in self._map.items():
            if _is_marker(key):
                present.add(owner_of(key))
                continue
            payload = payload_of(bytes(value))
            if payload:  # empty: a tombstone
                current[key] = payload
        for o in present & self._previous.keys():
            del self._previous[o]
        view = dict(current)
        for entries in self._previous.values():
            view.update(entries)
        self._dirty = False
        if view == self._view:
            return False
        self._view = view
        self._decoded = None
        self.version += 1
        self._journal.append((self.version, None))
        return True

    def _refresh_keys(self, keys: Iterable[str]) -> None:
        """`_refresh` for an update that touched only `keys` (no generation markers): the
        check told us which, so the view need not be rebuilt from the whole document."""
        changed: list[str] = []
        for key in keys:
            raw = self._map.get(key)
            payload = payload_of(bytes(raw)) if raw is not None else b""
            if payload:
                if self._view.get(key) != payload:
                    changed.append(key)
                self._view[key] = payload
            elif key in self._view:
                del self._view[key]
                changed.append(key)
        self._dirty = False
        if changed:
            self._decoded = None
            self.version += 1
            self._journal.extend((self.version, key) for key in changed)

    # --- local writes ----------------------------------------------------------------------
    def put(self, subkey: str, value: Any) -> None:
        """Write this owner's key ``f"{owner}/{subkey}"`` (a no-op if the value is unchanged)."""
        if not subkey:
            raise ValueError("subkey must be non-empty")
        raw = pack(value)
        if self._own.get(subkey) == raw:
            return
        self._own[subkey] = raw
        key = f"{self.owner}/{subkey}"
        self._write({key: raw})
        self._local_changed(key, raw)

    def delete(self, subkey: str) -> None:
        if self._own.pop(subkey, None) is None:
            return
        key = f"{self.owner}/{subkey}"
        self._write({key: b""})
        self._local_changed(key, None)

    def _local_changed(self, key: str, raw: bytes | None) -> None:
        # own keys never sit in the fallback, so the view changes by exactly this key
        self._dirty = False
        if raw is None:
            self._view.pop(key, None)
        else:
            self._view[key] = raw
        self._decoded = None
        self.version += 1
        self._journal.append((self.version, key))

    # --- sync ------------------------------------------------------------------------------
    def take_delta(self) -> bytes | None:
        """The local writes since the last take, as an envelope to push to peers."""
        if not self._pending:
            return None
        merged = self._pending[0] if len(self._pending) == 1 else merge_updates(*self._pending)
        self._pending = []
        return encode_update(self.generation, bytes(merged))

    def state_vector(self) -> bytes:
        return encode_update(self.generation, bytes(self._doc.get_state()))

    def diff(self, state_vector: bytes) -> bytes | None:
        """What a peer holding `state_vector` misses. An older generation is answered with our
        full state (so the peer adopts ours); a newer one with None: the peer is ahead, and a
        state vector is no proof of that, so ask it for its (signed) state instead."""
        generation, sv = decode_update(state_vector)
        if generation > self.generation:
            return None
        if generation < self.generation:
            return encode_update(self.generation, bytes(self._doc.get_update()))
        try:
            y.decode_state_vector(sv)
            return encode_update(self.generation, bytes(self._doc.get_update(sv)))
        except Exception as e:
            raise ReplicaError(f"bad state vector: {e}") from e
        except BaseException as e:  # pyo3 panics derive from BaseException
            if type(e).__name__ != "PanicException":
                raise
            raise ReplicaError(f"bad state vector: {e}") from e

    def apply(self, update: bytes) -> bool:
        """Merge a peer's envelope if every change in it is allowed; True if the visible content
        changed. Raises ReplicaError (RejectedUpdate when a rule is broken)."""
        before = self.version
        outcome = self._apply(update)
        if outcome == _WAITING:
            self._defer(update)
        elif outcome == _APPLIED:
            self._retry_deferred()
        return self.version != before

    def _apply(self, update: bytes) -> str:
        generation, payload = decode_update(update)
        if generation < self.generation:
            return _IGNORED
        try:
            parsed = y.decode(payload)
        except y.UpdateError as e:
            raise ReplicaError(f"bad update: {e}") from e
        try:
            if generation > self.generation:
                ctx = ownership.Context(self.namespace, generation, self.validate)
                if not ownership.check(parsed, ItemIndex(), ctx).owners:
                    return _IGNORED  # nothing signed in that generation: no reason to adopt it
                self._adopt(generation)
            ctx = ownership.Context(self.namespace, self.generation, self.validate)
            added = ownership.check(parsed, self._index, ctx)
        except ownership.Rejected as e:
            raise RejectedUpdate(e.reason, e.detail) from None
        except ownership.Unresolved:
            return _WAITING
        try:
            self._doc.apply_update(payload)
        except Exception as e:
            self._refresh()
            raise ReplicaError(f"bad update: {e}") from e
        except BaseException as e:  # pyo3 panics derive from BaseException
            if type(e).__name__ != "PanicException":
                raise
            self._refresh()
            raise ReplicaError(f"bad update: {e}") from e
        ownership.merge_into(self._index, added)
        if self._dirty:
            touched = added.latest.keys()
            if any(_is_marker(k) for k in touched):
                self._refresh()  # an owner entered this generation: its fallback goes
            else:
                self._refresh_keys(touched)
        return _APPLIED

    def _defer(self, update: bytes) -> None:
        if update in self._deferred:
            return
        self._deferred.append(update)
        while len(self._deferred) > MAX_DEFERRED or (
            len(self._deferred) > 1 and sum(map(len, self._deferred)) > MAX_DEFERRED_BYTES
        ):
            self._deferred.popleft()

    def _retry_deferred(self) -> None:
        """Updates that waited for a predecessor: apply those that can be applied now (a rule
        broken now drops the update; anti-entropy brings whatever is still missing)."""
        progress = True
        while progress and self._deferred:
            progress = False
            for update in list(self._deferred):
                try:
                    outcome = self._apply(update)
                except ReplicaError:
                    outcome = _IGNORED
                if outcome != _WAITING:
                    self._deferred.remove(update)
                    progress = progress or outcome == _APPLIED

    # --- compaction ------------------------------------------------------------------------
    def compact(self) -> None:
        """Start generation + 1 holding only our own items; peers adopt it when they hear it."""
        self._adopt(self.generation + 1)

    def release_previous(self) -> bool:
        """Forget the previous generation's items of owners that never re-put (dead nodes)."""
        if not self._previous:
            return False
        self._previous = {}
        return self._refresh()

    def previous_owners(self) -> set[str]:
        return set(self._previous)

    def stats(self) -> dict[str, int]:
        state = len(self._doc.get_update())
        fresh: Doc = Doc(client_id=1)
        fmap: Map = fresh.get(y.ROOT, type=Map)
        live = 0
        with fresh.transaction():
            for k, v in self._map.items():
                raw = bytes(v)
                if _is_marker(k) or payload_of(raw):  # tombstones are not live
                    fmap[k] = raw
                    live += not _is_marker(k)
        fresh_size = len(fresh.get_update())
        return {
            "generation": self.generation,
            "state_bytes": state,
            "state_vector_bytes": len(self._doc.get_state()),
            "live_keys": live,
            "tombstone_bytes": max(0, state - fresh_size),
        }


_APPLIED, _IGNORED, _WAITING = "applied", "ignored", "waiting"
