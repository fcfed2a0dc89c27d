"""Per node, per worker url: a bounded summary of recently routed prefixes, as hashes only.

A node that joins, or takes over a dead node's traffic, seeds its cache-aware routing from the
summaries other nodes publish instead of starting cold. A summary is the concatenation of up to
`MAX_HASHES` distinct `HASH_BYTES`-byte prefix hashes (smg.pipeline.prefix_hints: keyed, chained
per block): never the prompt text itself. Subkey ``f"c/{url}"`` of the publishing node; values
are hints, so losing a dead node's summaries at compaction is fine. `valid_value` is what every
node checks before merging a peer's summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from smg.mesh.replica import Replica

PREFIX = "c/"
HASH_BYTES = 8
MAX_HASHES = 1024
MAX_URL_CHARS = 2048


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


def valid_value(subkey: str, value: Any) -> bool:
    """May a peer's value for `subkey` enter the cache document? (bytes of whole hashes)"""
    url = subkey[len(PREFIX) :]
    return (
        subkey.startswith(PREFIX)
        and 0 < len(url) <= MAX_URL_CHARS
        and type(value) is bytes
        and 0 < len(value) <= MAX_HASHES * HASH_BYTES
        and len(value) % HASH_BYTES == 0
    )


class CacheSummaries:
    def __init__(self, replica: Replica, node_id: str) -> None:
        if replica.owner != node_id:
            raise ValueError("summaries are published through their own node's replica")
        self.replica = replica
        self.node_id = node_id

    def publish(self, url: str, hashes: Iterable[bytes]) -> None:
        """Replace our summary for `url` (most recent first; truncated to the bounds)."""
        items = bound(hashes)
        if items:
            self.replica.put(PREFIX + url, b"".join(items))
        else:
            self.replica.delete(PREFIX + url)

    def imported(self, exclude_owner: str | None = None) -> dict[str, list[bytes]]:
        """url -> hashes published by other nodes (merged, deduplicated, bounded)."""
        exclude = self.node_id if exclude_owner is None else exclude_owner
        merged: dict[str, list[bytes]] = {}
        for key, value in sorted(self.replica.items().items()):
            owner, _, sub = key.partition("/")
            if owner == exclude or not sub.startswith(PREFIX):
                continue
            merged.setdefault(sub[len(PREFIX) :], []).extend(split(value))
        return {url: bound(hs) for url, hs in merged.items()}

    def changed(self, seen: dict[str, bytes]) -> list[tuple[str, list[bytes]]]:
        """(url, hashes) of the other nodes' summaries whose bytes differ from `seen` (which is
        updated in place): a cheap byte comparison instead of decoding every summary."""
        out: list[tuple[str, list[bytes]]] = []
        raw_items = self.replica.raw_items()
        for key, raw in raw_items.items():
            owner, _, sub = key.partition("/")
            if owner == self.node_id or not sub.startswith(PREFIX) or seen.get(key) == raw:
                continue
            seen[key] = raw
            hashes = split(self.replica.get(key))
            if hashes:
                out.append((sub[len(PREFIX) :], hashes))
        for key in seen.keys() - raw_items.keys():
            del seen[key]
        return out
