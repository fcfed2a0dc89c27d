"""The simulated engine's prefix cache: shared KV blocks, LRU eviction and the KV events.

Pure: the scheduler (`engine_core.EngineCore`) matches, holds, stores and releases blocks
through it; nothing here does IO or reads a clock.

Blocks of `block_size` tokens are keyed by a hash chain over the token ids (Python's tuple
hash: deterministic for ints, a signed 64-bit value). A lookup matches full prompt blocks but
always leaves at least one prompt token to compute, as vLLM does. Blocks referenced by a
running request are pinned; unreferenced blocks are evicted least-recently-used, leaves first,
only when an admission needs room. Stores, removals and clears are queued as `KvEvent`s for
subscribers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

_ROOT_HASH = 0x5EED_B10C


@dataclass(frozen=True, slots=True)
class BlocksStored:
    parent_hash: int | None
    blocks: tuple[tuple[int, tuple[int, ...]], ...]  # (hash, token ids), parent first


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CacheCleared:
    pass


KvEvent = BlocksStored | BlocksRemoved | CacheCleared


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """The hash chain of the full blocks of `tokens`."""
    out: list[int] = []
    h = _ROOT_HASH
    for start in range(0, len(tokens) - block_size + 1, block_size):
        h = hash((h, tuple(tokens[start : start + block_size])))
        out.append(h)
    return out


class _Block:
    __slots__ = ("children", "parent", "refs", "tokens")

    def __init__(self, parent: int | None, tokens: tuple[int, ...]) -> None:
        self.parent = parent
        self.tokens = tokens
        self.refs = 0
        self.children = 0


class PrefixCache:
    """One engine's cached blocks, least recently used first. Not thread-safe."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._blocks: OrderedDict[int, _Block] = OrderedDict()  # least recently used first
        self._unref_blocks = 0
        self._events: list[KvEvent] = []

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def unreferenced(self) -> int:
        """Blocks no running sequence holds (evictable, unless they have children)."""
        return self._unref_blocks

    def take_events(self) -> list[KvEvent]:
        events, self._events = self._events, []
        return events

    def match(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Full prompt blocks already cached, leaving at least one prompt token to compute."""
        limit = (prompt_len - 1) // self.block_size
        n = 0
        for h in hashes[:limit]:
            if h not in self._blocks:
                break
            n += 1
        return n

    def unreferenced_among(self, hashes: Sequence[int]) -> int:
        """How many of these cached blocks no sequence holds."""
        return sum(1 for h in hashes if self._blocks[h].refs == 0)

    def hold(self, hashes: Sequence[int]) -> None:
        """Reference cached blocks (a matched prefix) and mark them recently used."""
        for h in hashes:
            self._ref(h)
            self._blocks.move_to_end(h)

    def store(
        self, held: list[int], hashes: Sequence[int], tokens: tuple[int, ...], upto: int
    ) -> None:
        """Make blocks [len(held), upto) of `tokens` shared blocks; append them to `held`."""
        bs = self.block_size
        run: list[tuple[int, tuple[int, ...]]] = []
        run_parent: int | None = None
        for j in range(len(held), upto):
            h = hashes[j]
            parent = hashes[j - 1] if j else None
            block = self._blocks.get(h)
            if block is None:
                block = _Block(parent, tokens[j * bs : (j + 1) * bs])
                self._blocks[h] = block
                self._unref_blocks += 1
                if parent is not None:
                    self._blocks[parent].children += 1
                if not run:
                    run_parent = parent
                run.append((h, block.tokens))
            else:
                self._blocks.move_to_end(h)
                if run:
                    self._events.append(BlocksStored(run_parent, tuple(run)))
                    run = []
            self._ref(h)
            held.append(h)
        if run:
            self._events.append(BlocksStored(run_parent, tuple(run)))

    def release(self, held: Sequence[int]) -> None:
        """Drop one reference to each of these blocks."""
        for h in held:
            block = self._blocks[h]
            block.refs -= 1
            if block.refs == 0:
                self._unref_blocks += 1

    def evict(self, count: int, keep: set[int]) -> None:
        """Evict `count` unreferenced blocks, least recently used leaves first."""
        removed: list[int] = []
        while len(removed) < count:
            progress = False
            for h, block in list(self._blocks.items()):
                if block.refs or block.children or h in keep:
                    continue
                del self._blocks[h]
                self._unref_blocks -= 1
                if block.parent is not None and block.parent in self._blocks:
                    self._blocks[block.parent].children -= 1
                removed.append(h)
                progress = True
                if len(removed) >= count:
                    break
            if not progress:
                break
        if removed:
            self._events.append(BlocksRemoved(tuple(removed)))

    def clear(self) -> None:
        """Drop every block (the caller makes sure none is held)."""
        self._blocks.clear()
        self._unref_blocks = 0
        self._events.append(CacheCleared())

    def _ref(self, h: int) -> None:
        block = self._blocks[h]
        if block.refs == 0:
            self._unref_blocks -= 1
        block.refs += 1
