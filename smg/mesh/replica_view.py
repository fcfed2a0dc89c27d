"""What the readers of a replica (smg/mesh/replica.py) see: the visible items.

`ReplicaView` holds the visible key -> value bytes (the document's live items plus the previous
generation's fallback, as `Replica` computes them), its `version` (bumped at every visible
change), a bounded journal of which keys each version changed (`changed_since`), and the values
decoded once per change of their bytes. `Replica` writes it; everyone else only reads.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from smg.mesh.doc_wire import unpack
from smg.mesh.ownership import owner_of

MAX_JOURNAL = 4096  # (version, key) entries kept for `changed_since`


class ReplicaView:
    """The visible items of one namespace and their reads (the base of `Replica`)."""

    def __init__(self) -> None:
        self.version = 0
        self._view: dict[str, bytes] = {}
        self._decoded: dict[str, Any] | None = None
        self._decode_cache: dict[str, tuple[bytes, Any]] = {}
        # which visible keys each version changed (None: any of them), newest last, bounded
        self._journal: deque[tuple[int, str | None]] = deque(maxlen=MAX_JOURNAL)

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

    def changed_since(self, version: int) -> set[str] | None:
        """The visible keys changed (set, overwritten or gone) after `version`, or None when
        that is no longer known (a whole refresh since, or older than the bounded journal):
        lets a reader of a large document look at what changed instead of every key."""
        if version == self.version:
            return set()
        journal = self._journal
        if version > self.version or not journal or journal[0][0] > version:
            return None
        out: set[str] = set()
        for v, key in reversed(journal):
            if v <= version:
                break
            if key is None:
                return None
            out.add(key)
        return out

    def raw_items_view(self) -> Mapping[str, bytes]:
        """The live view itself, read-only and valid until the next change (no copy)."""
        return MappingProxyType(self._view)

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


_SKIP = object()
