"""Per node, per worker url: a bounded summary of recently routed prefixes, as hashes only.

A node that joins, or takes over a dead node's traffic, seeds its cache-aware routing from the
summaries other nodes publish instead of starting cold. A summary is up to `MAX_HASHES` distinct
`HASH_BYTES`-byte prefix hashes (smg.pipeline.prefix_hints: keyed, chained per block): never the
prompt text itself.

Delta-encoded (issue 15, docs/scale.md change 2): a summary lives in a ring of `SLOTS` subkeys
``f"c/{url}#{slot}"`` of the publishing node, and a publish writes only the hashes the ring does
not hold yet (smg.mesh.delta_ring), so it costs what is new, not the whole 8 KB. Readers take
the union of a url's slots; `changed` hands out only the slots that changed, which the hints
learn on top of what they know. A summary key without a slot (``f"c/{url}"``, what nodes before
the ring published) is still read. Values are hints, so losing a dead node's summaries at
compaction is fine. `valid_value` is what every node checks before merging a peer's summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from smg.mesh.delta_ring import SLOT_ITEMS, SLOTS, DeltaRing
from smg.mesh.replica import Replica

PREFIX = "c/"
HASH_BYTES = 8
MAX_HASHES = 1024
MAX_URL_CHARS = 2048
assert SLOTS * SLOT_ITEMS >= 2 * MAX_HASHES  # a publish never wraps onto its own slots


def bound(hashes: Iterable[bytes]) -> list[bytes]:
    """The first MAX_HASHES distinct hashes of the right size, in order."""
    out: dict[bytes, None] = {}
    for h in hashes:
        if type(h) is bytes and len(h) == HASH_BYTES:
            out[h] = None
            if len(out) == MAX_HASHES:
                break
    return list(out)


def split(value: Any) -> list[bytes]:
    """The hashes of a summary value (empty if it is not one)."""
    if type(value) is not bytes or len(value) % HASH_BYTES:
        return []
    return [value[i : i + HASH_BYTES] for i in range(0, len(value), HASH_BYTES)]


def slot_key(url: str, slot: int) -> str:
    return f"{PREFIX}{url}#{slot}"


def parse(subkey: str) -> tuple[str, int | None] | None:
    """(url, slot) of a summary subkey (slot None: a whole summary, the form before the ring);
    None if `subkey` is not one."""
    if not subkey.startswith(PREFIX):
        return None
    rest = subkey[len(PREFIX) :]
    url, sep, slot = rest.rpartition("#")
    if sep and slot.isascii() and slot.isdigit():  # a slot, in range, of a url
        return (url, int(slot)) if url and len(slot) <= 3 and int(slot) < SLOTS else None
    return (rest, None) if rest else None


def valid_value(subkey: str, value: Any) -> bool:
    """May a peer's value for `subkey` enter the cache document? (bytes of whole hashes, at
    most a slot's worth in a slot, a summary's worth in a whole summary)"""
    parsed = parse(subkey)
    if parsed is None or len(parsed[0]) > MAX_URL_CHARS:
        return False
    most = MAX_HASHES if parsed[1] is None else SLOT_ITEMS
    return (
        type(value) is bytes
        and 0 < len(value) <= most * HASH_BYTES
        and len(value) % HASH_BYTES == 0
    )


@dataclass
class Seen:
    """A reader's place in the summaries: the slot bytes last handed out, and as of which
    replica version."""

    raw: dict[str, bytes] = field(default_factory=dict)
    version: int = -1


class CacheSummaries:
    def __init__(self, replica: Replica, node_id: str) -> None:
        if replica.owner != node_id:
            raise ValueError("summaries are published through their own node's replica")
        self.replica = replica
        self.node_id = node_id
        self._rings: dict[str, DeltaRing] = {}  # url -> its ring, for the urls we publish

    def publish(self, url: str, hashes: Iterable[bytes]) -> None:
        """Our summary for `url` is now `hashes` (most recent first; truncated to the bounds):
        write the hashes our ring does not hold yet (an empty summary clears the ring)."""
        items = bound(hashes)
        ring = self._rings.get(url)
        if ring is None:
            if not items:
                return
            ring = self._rings[url] = DeltaRing()
        for slot, held in ring.plan(items).items():
            if held:
                self.replica.put(slot_key(url, slot), b"".join(held))
            else:
                self.replica.delete(slot_key(url, slot))
        if not items:
            del self._rings[url]

    def retain(self, urls: Iterable[str]) -> list[str]:
        """Clear the summaries of every url not in `urls` (workers that left); those cleared."""
        keep = set(urls)
        gone = [url for url in self._rings if url not in keep]
        for url in gone:
            self.publish(url, ())
        return gone

    def published(self) -> set[str]:
        return set(self._rings)

    def imported(self, exclude_owner: str | None = None) -> dict[str, list[bytes]]:
        """url -> hashes published by other nodes (merged, deduplicated, bounded)."""
        exclude = self.node_id if exclude_owner is None else exclude_owner
        slots: list[tuple[str, str, int, Any]] = []
        for key, value in self.replica.items().items():
            owner, _, sub = key.partition("/")
            parsed = parse(sub) if owner != exclude else None
            if parsed is not None:
                slots.append((owner, parsed[0], -1 if parsed[1] is None else parsed[1], value))
        merged: dict[str, list[bytes]] = {}
        for _owner, url, _slot, value in sorted(slots, key=lambda s: s[:3]):
            merged.setdefault(url, []).extend(split(value))
        return {url: bound(hs) for url, hs in merged.items()}

    def changed(self, seen: Seen) -> list[tuple[str, list[bytes]]]:
        """(url, hashes) of the other nodes' summary slots whose bytes differ from `seen` (which
        is updated in place): only what changed, for readers that learn on top of what they
        know. Looks only at the keys the replica changed since the last call when it still
        knows them (a 100-node document holds ~13,000 slot keys), else compares every key."""
        replica = self.replica
        view = replica.raw_items_view()
        keys = replica.changed_since(seen.version)
        seen.version = replica.version
        out: list[tuple[str, list[bytes]]] = []
        for key in view if keys is None else keys:
            raw = view.get(key)
            old = seen.raw.get(key)
            if old is raw or old == raw:  # most keys, unchanged: the same bytes object
                continue
            if raw is None:
                del seen.raw[key]
                continue
            owner, _, sub = key.partition("/")
            parsed = parse(sub) if owner != self.node_id else None
            if parsed is None:
                continue
            seen.raw[key] = raw
            hashes = split(replica.get(key))
            if hashes:
                out.append((parsed[0], hashes))
        if keys is None:
            for key in seen.raw.keys() - view.keys():
                del seen.raw[key]
        return out
