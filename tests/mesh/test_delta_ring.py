"""The delta ring's invariants, over arbitrary sequences of summaries (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.mesh.delta_ring import DeltaRing

ITEMS = st.integers(0, 200).map(lambda i: i.to_bytes(8, "big"))
SUMMARIES = st.lists(st.lists(ITEMS, max_size=16, unique=True), max_size=40)


def replay(ring: DeltaRing, slots: list[tuple[bytes, ...]], summary: list[bytes]) -> int:
    """Apply one publish's writes to a reader's copy of the slots; the items written."""
    writes = ring.plan(summary)
    for i, items in writes.items():
        slots[i] = items
    return sum(len(items) for items in writes.values())


@settings(max_examples=examples(300), deadline=None)
@given(SUMMARIES, st.integers(1, 6), st.integers(1, 8))
def test_the_union_of_the_slots_always_holds_the_summary(
    summaries: list[list[bytes]], n_slots: int, slot_items: int
) -> None:
    ring = DeltaRing(n_slots, slot_items)
    reader: list[tuple[bytes, ...]] = [()] * n_slots
    for summary in summaries:
        summary = summary[: ring.capacity // 2]
        replay(ring, reader, summary)
        held = [h for items in reader for h in items]
        assert len(held) == len(set(held))  # each item in exactly one slot
        assert set(held) == ring.held()  # the reader sees what the publisher thinks it wrote
        assert set(summary) <= set(held)
        assert all(len(items) <= slot_items for items in reader)
        if not summary:
            assert held == []


@settings(max_examples=examples(200), deadline=None)
@given(SUMMARIES)
def test_a_publish_writes_only_what_is_new_plus_at_most_what_it_evicts(
    summaries: list[list[bytes]],
) -> None:
    ring = DeltaRing(4, 8)
    reader: list[tuple[bytes, ...]] = [()] * 4
    for summary in summaries:
        before = ring.held()
        new = len(set(summary) - before)
        writes = ring.plan(summary)
        for i, items in writes.items():
            reader[i] = items
        written = sum(len(items) for items in writes.values())
        assert written >= new
        # refreshed items are ones the overwritten slots gave back: never more than they held
        assert written - new <= len(writes) * 8
        if new == 0 and summary:
            assert writes == {}  # an unchanged summary writes nothing


@pytest.mark.parametrize(("slots", "slot_items", "cost"), [(32, 64, 32), (16, 128, 64)])
def test_a_steady_stream_costs_the_new_items_times_lifetime_over_slots(
    slots: int, slot_items: int, cost: int
) -> None:
    """32 new per publish, a summary of the last 1024 (a hash lives 32 publishes): a ring of
    32 slots writes only the 32 new ones; one of 16 re-sends each live hash once, halfway."""
    ring = DeltaRing(slots, slot_items)
    summary: list[bytes] = []
    costs = []
    for step in range(200):
        summary[:0] = [(step * 32 + i).to_bytes(8, "big") for i in range(32)]
        del summary[1024:]
        writes = ring.plan(summary)
        costs.append(sum(len(items) for items in writes.values()))
        assert set(summary) <= ring.held()
        assert len(ring.held()) <= ring.capacity
    assert costs[100:] == [cost] * 100


def test_a_hot_summary_is_refreshed_a_slot_at_a_time() -> None:
    """A summary that stops changing costs nothing; a hot one mixed with new items is re-sent
    at most one slot's worth per publish (the slot it overwrites)."""
    ring = DeltaRing(8, 16)
    hot = [i.to_bytes(8, "big") for i in range(40)]
    ring.plan(hot)
    assert ring.plan(hot) == {}
    for step in range(50):
        new = (1000 + step).to_bytes(8, "big")
        writes = ring.plan([new, *hot])
        assert sum(len(v) for v in writes.values()) <= 1 + 16
        assert set(hot) | {new} <= ring.held()


def test_clear_and_bounds() -> None:
    ring = DeltaRing(2, 2)
    a, b = b"a" * 8, b"b" * 8
    assert ring.plan([a, b]) == {0: (a, b)}
    assert ring.plan([]) == {0: ()}
    assert ring.held() == set() and ring.plan([]) == {}
    with pytest.raises(ValueError):
        ring.plan([a, b, b"c" * 8])
    with pytest.raises(ValueError):
        DeltaRing(0, 1)
