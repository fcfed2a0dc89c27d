"""Rendezvous (highest-random-weight) hashing of a prefix over workers: the same engine for a new
prefix in every router that sees it, with no communication.

Used by the cache-aware policy for a prefix it holds no good match for, when other routers share
its workers (`--workers N` processes, or mesh nodes): their trees learn of each other's decisions
only through the mesh's summaries (a second or more later), so until then each router would
place a conversation's next requests on its own. Hashing decides the same everywhere.

The score of worker w for a key is H(H(window) || url(w)), H being BLAKE2b-64, and the highest
score wins. It depends only on the key's first `WINDOW_ITEMS` items and the worker's url (worker
ids are per process), so:

- every router agrees whatever else it has routed (its tree, its loads, the candidates' order);
- a conversation's later turns (the same opening plus more) land where its first did, once the
  first turn is at least `WINDOW_ITEMS` long;
- a worker leaving moves only the prefixes it won; one joining takes about 1/n of them.

The window is `RECENT_ITEMS` (256 characters, or token ids in gRPC mode), what the trees' summaries
cover: long enough that a chat template's or a short system prompt's fixed opening does not pin
every request to one engine, short enough that most conversations' first turn spans it. Prompts
sharing a longer opening do land on one engine (the tree would pin them there too once the shared
part passes the cache threshold); the policy's balance thresholds still move them when loads
diverge. No hashing is cryptographic here: the scores only need to be spread and stable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from smg.pipeline.cache_state import RECENT_ITEMS
from smg.pipeline.prefix_hints import key_bytes

WINDOW_ITEMS = RECENT_ITEMS
_DIGEST = 8


def window_digest(key: str | Sequence[int]) -> bytes | None:
    """The hash of `key`'s first `WINDOW_ITEMS` items; None when it cannot be hashed (a token id
    past int64)."""
    data = key_bytes(key[:WINDOW_ITEMS])
    if data is None:
        return None
    return hashlib.blake2b(data, digest_size=_DIGEST).digest()


def pick(digest: bytes, urls: Sequence[str]) -> int:
    """Index of the url with the highest score for `digest` (the first on a tie, which BLAKE2b
    makes astronomically rare). `urls` must not be empty."""
    best, best_score = 0, b""
    for i, url in enumerate(urls):
        score = hashlib.blake2b(digest + url.encode(), digest_size=_DIGEST).digest()
        if score > best_score:
            best, best_score = i, score
    return best
