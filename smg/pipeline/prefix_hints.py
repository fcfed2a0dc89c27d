"""Prefix hints: which workers other gateways sent a prefix to, known by hash, never by text.

A mesh node that joins, or takes over a dead node's traffic, should route like the others did
(to the workers whose KV caches hold the prefixes) instead of starting cold. The nodes publish,
per worker, hashes of the prefixes they recently routed there (mesh/cache_summary.py), and the
cache-aware policy of another node consults these hints when its own tree has no good match.

Hashes, not prompt text: what travels and sits in every node's replicated state must not be the
users' prompts. A prefix is cut into blocks of `BLOCK_ITEMS` items (characters, or token ids in
gRPC mode); hash i covers the first i + 1 blocks, chained (h_i = H(h_{i-1} || block_i)) and
seeded with the model name, so a request matches the longest published prefix it shares, block
by block. H is BLAKE2b-64 keyed with a secret derived from the cluster key: a short common prefix
(a system prompt) cannot be confirmed by hashing guesses without the key. Within a cluster the
secret must be the same on every node (it follows the primary key: during a key rotation, nodes
with different primaries miss each other's hints until the rotation completes; hints only).

The map is bounded (`MAX_ENTRIES`, least recently learned evicted first) and each hash keeps at
most `MAX_HOLDERS` workers. Matching hashes the request key block by block and stops at the first
block no node published (at most `MAX_BLOCKS`): ~1 us for a prompt no node has seen.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence

BLOCK_ITEMS = 16
MAX_BLOCKS = 16  # 256 items: what CacheAwareState remembers of each routed prefix
HINTED_ITEMS = BLOCK_ITEMS * MAX_BLOCKS  # the most of a prefix a hint can vouch for
HASH_BYTES = 8
MAX_ENTRIES = 16384
MAX_HOLDERS = 4
KEYLESS_SECRET = b"smg prefix hints: keyless loopback mesh"


def key_bytes(key: str | Sequence[int]) -> bytes | None:
    """The bytes hashed for a key (or a block of one): UTF-8 text, or the token ids as int64;
    None for a token id that does not fit."""
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    try:
        return struct.pack(f"<{len(key)}q", *key)
    except (struct.error, TypeError):
        return None


@functools.lru_cache(maxsize=256)
def _seed(model: str, secret: bytes) -> bytes:
    return hashlib.blake2b(model.encode(), digest_size=HASH_BYTES, key=secret).digest()


def _chain(model: str, key: str | Sequence[int], secret: bytes) -> Iterator[bytes]:
    """The chained hashes of `key`'s whole blocks (at most MAX_BLOCKS), lazily."""
    n = min(len(key) // BLOCK_ITEMS, MAX_BLOCKS)
    if n == 0:
        return
    h = _seed(model, secret)
    for i in range(n):
        data = key_bytes(key[i * BLOCK_ITEMS : (i + 1) * BLOCK_ITEMS])
        if data is None:  # a token id past int64: no hints for this key
            return
        h = hashlib.blake2b(h + data, digest_size=HASH_BYTES, key=secret).digest()
        yield h


def block_hashes(model: str, key: str | Sequence[int], secret: bytes) -> list[bytes]:
    """The chained hashes of `key`'s whole blocks (at most MAX_BLOCKS), for `model`; empty when
    the key cannot be hashed."""
    out = list(_chain(model, key, secret))
    return out if len(out) == min(len(key) // BLOCK_ITEMS, MAX_BLOCKS) else []


class PrefixHints:
    """A bounded map: prefix hash -> the workers it was routed to (by other nodes)."""

    __slots__ = ("_map", "max_entries", "secret")

    def __init__(self, secret: bytes = KEYLESS_SECRET, max_entries: int = MAX_ENTRIES) -> None:
        self.secret = secret
        self.max_entries = max_entries
        self._map: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def learn(self, worker_id: str, hashes: Iterable[bytes]) -> None:
        """Hashes of prefixes routed to `worker_id` (most recent first)."""
        for h in reversed(list(hashes)):  # the most recent ends up the newest
            holders = self._map.pop(h, ())
            if worker_id not in holders:
                holders = (worker_id, *holders)[:MAX_HOLDERS]
            self._map[h] = holders
        while len(self._map) > self.max_entries:
            self._map.popitem(last=False)

    def workers(self) -> set[str]:
        """Every worker some hint names."""
        return {w for holders in self._map.values() for w in holders}

    def forget(self, worker_id: str) -> None:
        for h, holders in list(self._map.items()):
            if worker_id in holders:
                rest = tuple(w for w in holders if w != worker_id)
                if rest:
                    self._map[h] = rest
                else:
                    del self._map[h]

    def match(
        self, model: str, key: str | Sequence[int], among: Collection[str]
    ) -> tuple[int, set[str]]:
        """(items of `key` covered by the longest hinted prefix, the candidates holding it).
        Publishers send every block of a prefix, so the walk stops at the first block nobody
        published: a prompt no node has seen costs one hash."""
        best: tuple[int, set[str]] = (0, set())
        if not self._map:
            return best
        for i, h in enumerate(_chain(model, key, self.secret)):
            holders = self._map.get(h)
            if not holders:
                break
            found = {w for w in holders if w in among}
            if found:
                best = ((i + 1) * BLOCK_ITEMS, found)
        return best
