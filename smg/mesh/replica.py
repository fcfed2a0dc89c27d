"""One replicated namespace: a pycrdt Doc holding one Map, wrapped as a pure core.

Disciplines (each answers a measured pycrdt behaviour):

* **One writer per key.** Keys are ``f"{owner}/{subkey}"`` and only ``owner`` writes them, so
  pycrdt's client-id tie-break for concurrent writes never decides anything.
* **Fresh client id per doc.** Reusing a client id after a restart silently loses writes, so each
  doc (every boot, every generation) draws a new id from the injected ``random.Random``. The shell
  must seed that Random from OS entropy (``random.Random()``), never a constant.
* **Values are msgpack bytes**: pycrdt would turn small ints into floats.
* **Bounded tombstones by generation.** Overwriting one key again and again costs nothing (the
  deleted items squash into one range), but interleaved overwrites of many keys cost ~6 B each
  and every deleted key leaves ~13 B + its name forever. ``compact()`` starts a fresh doc.

Generation rule (what makes compaction lose no write of a live owner):

1. Every byte string this module hands out or accepts (delta, diff, state vector) is an envelope
   ``msgpack([generation, payload])`` (`encode_update` / `decode_update`).
2. ``compact()`` moves to ``generation + 1``: a fresh doc holding only this node's own items plus
   its generation marker (key ``f"{owner}/"``).
3. A node that sees a higher generation (in ``apply`` or ``diff``) adopts it the same way: fresh
   doc, fresh client id, re-put of its *own* items (the owner's intent is kept outside the doc, so
   nothing it wrote is lost), then merges the peer's payload. Payloads of a lower generation are
   ignored (``apply`` returns False); ``diff`` answers them with the full state of the newer
   generation so the laggard adopts it.
4. Only owners re-put. Until an owner's marker shows up in the new generation, readers keep seeing
   that owner's items from the previous generation (the *fallback*), so a compaction causes no
   visible blip. Items of owners that never come back (dead nodes) stay visible from the fallback
   until ``release_previous()``; after that they are gone. Layers that must keep a dead node's
   items (the worker registry) copy them under their own prefix first (see worker_records.py).
5. Concurrent compactions to the same generation merge like any other writes (disjoint owners).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import msgpack
from pycrdt import Doc, Map, merge_updates

MAX_CLIENT_ID = 2**53  # Yjs client ids must survive a JS number


class ReplicaError(Exception):
    """Bytes from a peer could not be decoded or merged (the peer's fault, not ours)."""


def encode_update(generation: int, payload: bytes) -> bytes:
    """Wrap a pycrdt update or state vector with the generation it belongs to."""
    return msgpack.packb([generation, payload], use_bin_type=True)


def decode_update(data: bytes) -> tuple[int, bytes]:
    """Inverse of `encode_update`; raises ReplicaError on anything else."""
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception as e:
        raise ReplicaError(f"bad envelope: {e}") from e
    if (
        not isinstance(obj, list)
        or len(obj) != 2
        or not isinstance(obj[0], int)
        or isinstance(obj[0], bool)
        or obj[0] < 0
        or not isinstance(obj[1], bytes)
    ):
        raise ReplicaError("bad envelope: expected [generation, bytes]")
    return obj[0], obj[1]


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def owner_of(key: str) -> str:
    return key.split("/", 1)[0]


def _is_marker(key: str) -> bool:
    return key.endswith("/") and key.count("/") == 1


class Replica:
    """One namespace, one Map. Not thread-safe; owned by one actor."""

    def __init__(self, namespace: str, owner: str, rng: random.Random) -> None:
        if not owner or "/" in owner:
            raise ValueError(f"owner must be non-empty and contain no '/': {owner!r}")
        self.namespace = namespace
        self.owner = owner
        self._rng = rng
        self.generation = 0
        self.version = 0
        self._own: dict[str, bytes] = {}  # subkey -> packed value: the owner's intent
        self._previous: dict[str, dict[str, bytes]] = {}  # owner -> key -> packed (fallback)
        self._view: dict[str, bytes] = {}
        self._decoded: dict[str, Any] | None = None
        self._decode_cache: dict[str, tuple[bytes, Any]] = {}
        self._new_doc()

    # --- doc lifecycle ---------------------------------------------------------------------
    def _new_doc(self) -> None:
        self.client_id = self._rng.randrange(1, MAX_CLIENT_ID)
        self._doc: Doc = Doc(client_id=self.client_id)
        self._map: Map = self._doc.get("m", type=Map)
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

    def _write(self, sets: dict[str, bytes], dels: tuple[str, ...] = ()) -> None:
        self._local = True
        try:
            with self._doc.transaction():
                for k, v in sets.items():
                    self._map[k] = v
                for k in dels:
                    del self._map[k]
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
            if not isinstance(key, str) or "/" not in key:
                continue
            if _is_marker(key):
                present.add(owner_of(key))
            elif isinstance(value, bytes | bytearray):
                current[key] = bytes(value)
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
        return True

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
        self._write({}, (key,))
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

    # --- reads -----------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        raw = self._view.get(key)
        return None if raw is None else self._decode(raw)

    def items(self) -> dict[str, Any]:
        """Full key -> decoded value, for every visible item (undecodable values are skipped).
        Values are decoded once per change of their bytes (a summary of 64 x 256 token ids takes
        ~0.5 ms to decode: re-decoding every item on every update stalled the loop)."""
        if self._decoded is None:
            cache = self._decode_cache
            out: dict[str, Any] = {}
            for k, raw in self._view.items():
                hit = cache.get(k)
                if hit is not None and hit[0] == raw:
                    v = hit[1]
                else:
                    v = self._decode(raw, default=_SKIP)
                    cache[k] = (raw, v)
                if v is not _SKIP:
                    out[k] = v
            for k in cache.keys() - self._view.keys():
                del cache[k]
            self._decoded = out
        return dict(self._decoded)

    def raw_items(self) -> dict[str, bytes]:
        """Full key -> the value's encoded bytes (cheap: for spotting which items changed)."""
        return dict(self._view)

    def owned_by(self, node_id: str) -> dict[str, Any]:
        prefix = f"{node_id}/"
        return {k: v for k, v in self.items().items() if k.startswith(prefix)}

    def owners(self) -> set[str]:
        return {owner_of(k) for k in self._view}

    @staticmethod
    def _decode(raw: bytes, default: Any = None) -> Any:
        try:
            return unpack(raw)
        except Exception:
            return default

    def digest(self) -> str:
        """sha256 over the sorted visible items: equal content gives an equal digest anywhere."""
        h = hashlib.sha256()
        for k in sorted(self._view):
            kb = k.encode()
            raw = self._view[k]
            h.update(len(kb).to_bytes(4, "big") + kb + len(raw).to_bytes(4, "big") + raw)
        return h.hexdigest()

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

    def diff(self, state_vector: bytes) -> bytes:
        """What a peer holding `state_vector` misses. A newer generation is adopted first; an
        older one is answered with our full state (so the peer adopts ours)."""
        generation, sv = decode_update(state_vector)
        if generation > self.generation:
            self._adopt(generation)
        if generation < self.generation:
            return encode_update(self.generation, bytes(self._doc.get_update()))
        try:
            return encode_update(self.generation, bytes(self._doc.get_update(sv)))
        except Exception as e:
            raise ReplicaError(f"bad state vector: {e}") from e
        except BaseException as e:  # pyo3 panics derive from BaseException
            if type(e).__name__ != "PanicException":
                raise
            raise ReplicaError(f"bad state vector: {e}") from e

    def apply(self, update: bytes) -> bool:
        """Merge a peer's envelope; True if the visible content changed."""
        generation, payload = decode_update(update)
        if generation < self.generation:
            return False
        adopted = generation > self.generation
        if adopted:
            self._adopt(generation)
        before = self.version
        try:
            self._doc.apply_update(payload)
        except Exception as e:
            raise ReplicaError(f"bad update: {e}") from e
        except BaseException as e:  # pyo3 panics derive from BaseException
            if type(e).__name__ != "PanicException":
                raise
            raise ReplicaError(f"bad update: {e}") from e
        finally:
            if self._dirty:
                self._refresh()
        return self.version != before

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
        fmap: Map = fresh.get("m", type=Map)
        live = 0
        with fresh.transaction():
            for k, v in self._map.items():
                fmap[k] = bytes(v) if isinstance(v, bytearray) else v
                live += 1
        fresh_size = len(fresh.get_update())
        return {
            "generation": self.generation,
            "state_bytes": state,
            "state_vector_bytes": len(self._doc.get_state()),
            "live_keys": live,
            "tombstone_bytes": max(0, state - fresh_size),
        }


_SKIP = object()
