"""Two-level tokenization cache (pure: no IO, no clock, no locks; the event loop owns it).

L0 is an exact match: (text, add_special_tokens) -> ids, LRU, bounded by entries and bytes.

L1 is a prefix match at special-token boundaries. A rendered chat is full of atomic special
tokens (`<|im_start|>`, `<|im_end|>`): the tokenizer splits them out of the text *before*
normalising and pre-tokenising, so the text on either side is tokenized independently and
encode(text[:b]) + encode(text[b:]) == encode(text) whenever b is the end of a special token.
L1 stores the ids of the prefixes ending at such boundaries; a later request re-sending the
same history tokenizes only its new suffix. A prefix's key is (its length, a chained hash over
its segments): each segment is hashed once, so all boundaries of a text cost O(len(text))
(a cryptographic digest per boundary measured ~5x slower here). Python's str hash is keyed per
process (SipHash), and a false hit needs equal lengths and a 64-bit collision.

Storage is per text, not per boundary: one entry keeps the ids up to its last boundary, and a
key index maps each boundary to (entry, token count). When a newer text covers the same
boundaries (the next turn of a conversation) the index moves to it and the older entry, no
longer referenced, is dropped; so a conversation costs O(its length), not O(length x turns).

Use: `probe = cache.probe(text, add_special)`; if `probe.ids` is set it is the answer; else
tokenize `text[probe.prefix_chars:]`, prepend `probe.prefix_ids`, and hand the result to
`cache.complete(probe, ids)`. L1 is used only with add_special_tokens=False (a BOS/EOS added by
the post-processor would otherwise be duplicated at the seam).
"""

from __future__ import annotations

import re
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

MIB = 1024 * 1024
_ENTRY_OVERHEAD_BYTES = 200  # dict/OrderedDict slots, the array header, the key object
_BOUNDARY_OVERHEAD_BYTES = 120  # one prefix key + its (entry, count) tuple in the index
_ID_BYTES = 4  # ids kept as array('I')

PrefixKey = tuple[int, int]  # (prefix length in chars, chained segment hash)


@dataclass(frozen=True, slots=True)
class TokenCacheConfig:
    """The Rust gateway's `--tokenizer-cache-*` flags, same names and defaults."""

    tokenizer_cache_enable_l0: bool = False  # exact-match cache: repeated prompts
    tokenizer_cache_l0_max_entries: int = 10_000  # LRU bound on L0 entries
    tokenizer_cache_l0_max_memory: int = 256 * MIB  # bytes: texts + ids + per-entry overhead
    tokenizer_cache_enable_l1: bool = False  # special-token prefix cache: multi-turn chats
    tokenizer_cache_l1_max_memory: int = 50 * MIB  # bytes: ids + per-entry/boundary overhead

    @property
    def enabled(self) -> bool:
        return self.tokenizer_cache_enable_l0 or self.tokenizer_cache_enable_l1


@dataclass(frozen=True, slots=True)
class TokenCacheStats:
    """A snapshot of the counters (cumulative) and sizes (current)."""

    l0_hits: int
    l1_hits: int
    misses: int
    saved_tokens: int  # ids served from a cache instead of being tokenized again
    l0_entries: int
    l0_bytes: int
    l1_entries: int
    l1_boundaries: int
    l1_bytes: int


@dataclass(slots=True)
class CacheProbe:
    """What the cache knows about one text; carried from `probe` to `complete`."""

    text: str
    add_special_tokens: bool
    ids: list[int] | None = None  # set on an L0 hit: the whole answer
    prefix_chars: int = 0  # L1 hit: text[:prefix_chars] is already tokenized ...
    prefix_ids: list[int] = field(default_factory=list)  # ... into these ids
    # L1 boundaries in text order: (end offset in chars, prefix key, boundary token id)
    boundaries: list[tuple[int, PrefixKey, int]] = field(default_factory=list)


class _L1Entry:
    __slots__ = ("ids", "keys", "live", "nbytes")

    def __init__(self, ids: array[int], keys: list[PrefixKey]) -> None:
        self.ids = ids
        self.keys = keys
        self.live = len(keys)  # boundaries in the index still pointing here
        self.nbytes = (
            _ENTRY_OVERHEAD_BYTES + _ID_BYTES * len(ids) + _BOUNDARY_OVERHEAD_BYTES * len(keys)
        )


def _l0_bytes(text: str, n_ids: int) -> int:
    return _ENTRY_OVERHEAD_BYTES + len(text) + _ID_BYTES * n_ids


class TokenCache:
    """L0 + L1 caches for one tokenizer (ids are only meaningful for the tokenizer that made
    them). `boundary_tokens` maps each atomic special token's text to its id."""

    def __init__(
        self, config: TokenCacheConfig, boundary_tokens: Mapping[str, int] | None = None
    ) -> None:
        self.config = config
        self._l0: OrderedDict[tuple[str, bool], array[int]] = OrderedDict()
        self._l0_bytes = 0
        self._l1_index: dict[PrefixKey, tuple[_L1Entry, int]] = {}
        self._l1_lru: OrderedDict[int, _L1Entry] = OrderedDict()
        self._l1_bytes = 0
        self._boundary_re: re.Pattern[str] | None = None
        self._boundary_ids: dict[str, int] = {}
        self.l0_hits = self.l1_hits = self.misses = self.saved_tokens = 0
        if boundary_tokens:
            self.set_boundary_tokens(boundary_tokens)

    # -- setup -------------------------------------------------------------------------------

    def set_boundary_tokens(self, tokens: Mapping[str, int]) -> None:
        """Bind L1 to a tokenizer's atomic special tokens (once; rebinding must agree)."""
        tokens = {t: i for t, i in tokens.items() if t}
        if self._boundary_ids and self._boundary_ids != tokens:
            raise ValueError("TokenCache is already bound to another tokenizer's special tokens")
        self._boundary_ids = dict(tokens)
        # Longest first: Python's alternation is first-match, which then equals the tokenizer's
        # leftmost-longest matching of added tokens.
        ordered = sorted(tokens, key=len, reverse=True)
        self._boundary_re = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @property
    def l1_active(self) -> bool:
        return self.config.tokenizer_cache_enable_l1 and self._boundary_re is not None

    # -- lookups -----------------------------------------------------------------------------

    def probe(self, text: str, add_special_tokens: bool = False) -> CacheProbe:
        """Look `text` up in L0, then L1 (longest cached boundary prefix). Counts hits/misses."""
        result = CacheProbe(text, add_special_tokens)
        if self.config.tokenizer_cache_enable_l0:
            key = (text, add_special_tokens)
            hit = self._l0.get(key)
            if hit is not None:
                self._l0.move_to_end(key)
                result.ids = hit.tolist()
                self.l0_hits += 1
                self.saved_tokens += len(hit)
                return result
        if self.l1_active and not add_special_tokens:
            result.boundaries = self._scan(text)
            for end, pkey, _ in reversed(result.boundaries):
                found = self._l1_index.get(pkey)
                if found is None:
                    continue
                entry, count = found
                self._l1_lru.move_to_end(id(entry))
                result.prefix_chars = end
                result.prefix_ids = entry.ids[:count].tolist()
                self.l1_hits += 1
                self.saved_tokens += count
                return result
        self.misses += 1
        return result

    def _scan(self, text: str) -> list[tuple[int, PrefixKey, int]]:
        """Every special-token end in `text` with the key of the prefix up to it."""
        assert self._boundary_re is not None
        out: list[tuple[int, PrefixKey, int]] = []
        chain = 0
        pos = 0
        ids = self._boundary_ids
        for m in self._boundary_re.finditer(text):
            end = m.end()
            chain = hash((chain, text[pos:end]))
            pos = end
            out.append((end, (end, chain), ids[m.group()]))
        return out

    # -- stores ------------------------------------------------------------------------------

    def complete(self, probe: CacheProbe, ids: list[int]) -> None:
        """Remember the full tokenization of `probe.text` (after a miss or an L1 hit)."""
        if probe.ids is not None:
            return
        if self.config.tokenizer_cache_enable_l0:
            self._store_l0(probe.text, probe.add_special_tokens, ids)
        if self.l1_active and not probe.add_special_tokens and probe.boundaries:
            self._store_l1(probe, ids)

    def _store_l0(self, text: str, add_special: bool, ids: list[int]) -> None:
        cfg = self.config
        size = _l0_bytes(text, len(ids))
        if size > cfg.tokenizer_cache_l0_max_memory or cfg.tokenizer_cache_l0_max_entries <= 0:
            return
        key = (text, add_special)
        old = self._l0.pop(key, None)
        if old is not None:
            self._l0_bytes -= _l0_bytes(text, len(old))
        self._l0[key] = array("I", ids)
        self._l0_bytes += size
        while (
            len(self._l0) > cfg.tokenizer_cache_l0_max_entries
            or self._l0_bytes > cfg.tokenizer_cache_l0_max_memory
        ):
            (t, _), evicted = self._l0.popitem(last=False)
            self._l0_bytes -= _l0_bytes(t, len(evicted))

    def _store_l1(self, probe: CacheProbe, ids: list[int]) -> None:
        # Map each boundary to a token count: the k-th boundary is the k-th occurrence of a
        # boundary token's id in `ids` (boundary tokens are atomic and never come out of BPE).
        # `list.index` keeps the scan in C; it is small next to the tokenization it saves.
        counts: list[int] = []
        keys: list[PrefixKey] = []
        cursor = 0
        for _, key, token_id in probe.boundaries:
            try:
                cursor = ids.index(token_id, cursor) + 1
            except ValueError:
                return  # ids do not line up with the text: store nothing rather than guess
            counts.append(cursor)
            keys.append(key)
        entry = _L1Entry(array("I", ids[: counts[-1]]), keys)
        if entry.nbytes > self.config.tokenizer_cache_l1_max_memory:
            return
        for key, count in zip(keys, counts, strict=True):
            old = self._l1_index.get(key)
            if old is not None:
                self._release(old[0])
            self._l1_index[key] = (entry, count)
        self._l1_lru[id(entry)] = entry
        self._l1_bytes += entry.nbytes
        while self._l1_bytes > self.config.tokenizer_cache_l1_max_memory and self._l1_lru:
            _, victim = self._l1_lru.popitem(last=False)
            self._evict(victim)

    def _release(self, entry: _L1Entry) -> None:
        entry.live -= 1
        if entry.live == 0 and self._l1_lru.pop(id(entry), None) is not None:
            self._l1_bytes -= entry.nbytes

    def _evict(self, entry: _L1Entry) -> None:
        self._l1_bytes -= entry.nbytes
        for key in entry.keys:
            found = self._l1_index.get(key)
            if found is not None and found[0] is entry:
                del self._l1_index[key]

    # -- observability -----------------------------------------------------------------------

    def stats(self) -> TokenCacheStats:
        return TokenCacheStats(
            l0_hits=self.l0_hits,
            l1_hits=self.l1_hits,
            misses=self.misses,
            saved_tokens=self.saved_tokens,
            l0_entries=len(self._l0),
            l0_bytes=self._l0_bytes,
            l1_entries=len(self._l1_lru),
            l1_boundaries=len(self._l1_index),
            l1_bytes=self._l1_bytes,
        )

    def clear(self) -> None:
        self._l0.clear()
        self._l1_index.clear()
        self._l1_lru.clear()
        self._l0_bytes = self._l1_bytes = 0


def make_token_cache(config: TokenCacheConfig) -> TokenCache | None:
    """A cache when any level is enabled, else None (the tokenizer then skips the lookups)."""
    return TokenCache(config) if config.enabled else None
