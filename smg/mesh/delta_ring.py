"""A delta-encoded summary: a bounded ring of slots that each hold only what was new.

A pure core (no clock, no IO). Publishing a whole summary on every change costs its full size
per change and per peer (8 KB per engine per second, issue 15). Instead a publisher keeps a ring
of `SLOTS` slots per summary; a publish writes only the items not already held by the ring into
the next slot(s), and readers take the union of the live slots. So a publish costs about what is
new since the last one, and the union always holds the current summary:

- the slot overwritten is the one holding the fewest items still in the summary (the oldest
  of those), and it gives those back: they are written again with the new ones (a refresh).
  A summary whose items stream through costs only the new ones (the oldest slot's items have
  left it), and a hot summary that stays put is not re-sent (slots of items that left it are
  reused first). Each item is held by exactly one slot.
- a slot holds at most `SLOT_ITEMS` items; a publish with more new items than that fills
  consecutive slots. `SLOTS * SLOT_ITEMS` is at least twice the summary's bound, so one publish
  never wraps onto a slot it wrote itself, and the ring (the current summary plus items that
  left it but whose slot was not reused yet) is bounded by `SLOTS * SLOT_ITEMS` items.
- the slots are a fixed set of keys: overwriting them leaves no growing tombstones; clearing
  a summary writes at most `SLOTS` tombstones, once.

`plan` answers which slots to write (index -> items; an empty tuple clears the slot); the caller
writes them and nothing else. A steady state of `new` items per publish, with summaries that
live for about `SLOTS` publishes, costs `new` items per publish instead of the whole summary.
"""

from __future__ import annotations

from collections.abc import Sequence

SLOTS = 16
SLOT_ITEMS = 128


class DeltaRing:
    """The publisher's view of one summary's ring: what each slot holds as last written."""

    __slots__ = ("_held", "_seq", "_slots", "_written", "slot_items", "slots")

    def __init__(self, slots: int = SLOTS, slot_items: int = SLOT_ITEMS) -> None:
        if slots < 1 or slot_items < 1:
            raise ValueError("a ring needs at least one slot of at least one item")
        self.slots = slots
        self.slot_items = slot_items
        self._slots: list[tuple[bytes, ...]] = [() for _ in range(slots)]
        self._held: dict[bytes, int] = {}  # item -> the slot holding it
        self._written = [0] * slots  # per slot, when it was last written (publish count)
        self._seq = 0

    @property
    def capacity(self) -> int:
        return self.slots * self.slot_items

    def held(self) -> set[bytes]:
        """Every item the ring holds (what readers see as the union of the slots)."""
        return set(self._held)

    def slot(self, index: int) -> tuple[bytes, ...]:
        return self._slots[index]

    def plan(self, summary: Sequence[bytes]) -> dict[int, tuple[bytes, ...]]:
        """Take the ring to hold every item of `summary` (distinct, most recent first, at most
        half the capacity); the slots written, in writing order. An empty summary clears every
        slot still holding something."""
        if len(summary) * 2 > self.capacity:
            raise ValueError(f"{len(summary)} items overflow a ring of {self.capacity}")
        if not summary:
            return self.clear()
        current = set(summary)
        pending = [h for h in summary if h not in self._held]
        writes: dict[int, tuple[bytes, ...]] = {}
        if not pending:
            return writes
        self._seq += 1
        live = [0] * self.slots
        for h in summary:
            i = self._held.get(h, -1)
            if i >= 0:
                live[i] += 1
        while pending:
            # any slot not written yet by this publish would do (see the module's bound); the
            # one with the fewest live items, oldest first, costs the least refresh
            i = min(
                (j for j in range(self.slots) if j not in writes),
                key=lambda j: (live[j], self._written[j]),
            )
            self._written[i] = self._seq
            queued = set(pending)
            for h in self._slots[i]:  # the slot's live items go round again, after the new
                del self._held[h]
                if h in current and h not in queued:
                    pending.append(h)
            items, pending = tuple(pending[: self.slot_items]), pending[self.slot_items :]
            self._slots[i] = items
            for h in items:
                self._held[h] = i
            writes[i] = items
        return writes

    def clear(self) -> dict[int, tuple[bytes, ...]]:
        """Empty every slot; the ones that held something (to be written empty)."""
        writes: dict[int, tuple[bytes, ...]] = {i: () for i, s in enumerate(self._slots) if s}
        self._slots = [() for _ in range(self.slots)]
        self._held.clear()
        return writes
