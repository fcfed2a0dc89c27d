"""Per node, per worker url: a bounded summary of recently routed prefixes.

A node that joins, or takes over a dead node's traffic, seeds its cache-aware routing from the
summaries other nodes publish instead of starting cold. Each summary holds at most
`MAX_PREFIXES` prefixes of at most `MAX_ITEMS` items: a prefix is a str (characters) or a list of
int token ids. Subkey ``f"c/{url}"`` of the publishing node; values are hints, so losing a dead
node's summaries at compaction is fine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smg.mesh.replica import Replica

PREFIX = "c/"
MAX_PREFIXES = 64
MAX_ITEMS = 256

Prefix = str | list[int]


def bound(prefixes: Sequence[str | Sequence[int]]) -> list[Prefix]:
    """First MAX_PREFIXES distinct prefixes, each cut to MAX_ITEMS items; bad items dropped."""
    out: list[Prefix] = []
    seen: set[str | tuple[int, ...]] = set()
    for p in prefixes:
        item: Prefix
        if isinstance(p, str):
            item = p[:MAX_ITEMS]
            key: str | tuple[int, ...] = item
        elif all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            item = list(p[:MAX_ITEMS])
            key = tuple(item)
        else:
            continue
        if not item or key in seen:
            continue
        seen.add(key)
        out.append(item)
        if len(out) == MAX_PREFIXES:
            break
    return out


class CacheSummaries:
    def __init__(self, replica: Replica, node_id: str) -> None:
        if replica.owner != node_id:
            raise ValueError("summaries are published through their own node's replica")
        self.replica = replica
        self.node_id = node_id

    def publish(self, url: str, prefixes: Sequence[str | Sequence[int]]) -> None:
        """Replace our summary for `url` (most recent first; truncated to the bounds)."""
        items = bound(prefixes)
        if items:
            self.replica.put(PREFIX + url, items)
        else:
            self.replica.delete(PREFIX + url)

    def imported(self, exclude_owner: str | None = None) -> dict[str, list[Prefix]]:
        """url -> prefixes published by other nodes (merged, deduplicated, bounded)."""
        exclude = self.node_id if exclude_owner is None else exclude_owner
        merged: dict[str, list[Any]] = {}
        for key, value in sorted(self.replica.items().items()):
            owner, _, sub = key.partition("/")
            if owner == exclude or not sub.startswith(PREFIX) or not isinstance(value, list):
                continue
            url = sub[len(PREFIX) :]
            merged.setdefault(url, []).extend(v for v in value if isinstance(v, str | list))
        return {url: bound(ps) for url, ps in merged.items()}

    def changed(self, seen: dict[str, bytes]) -> list[tuple[str, list[Prefix]]]:
        """(url, prefixes) of the other nodes' summaries whose bytes differ from `seen` (which
        is updated in place): a cheap byte comparison instead of decoding every summary."""
        out: list[tuple[str, list[Prefix]]] = []
        raw_items = self.replica.raw_items()
        for key, raw in raw_items.items():
            owner, _, sub = key.partition("/")
            if owner == self.node_id or not sub.startswith(PREFIX) or seen.get(key) == raw:
                continue
            seen[key] = raw
            value = self.replica.get(key)
            if isinstance(value, list):
                out.append((sub[len(PREFIX) :], bound(value)))
        for key in seen.keys() - raw_items.keys():
            del seen[key]
        return out
