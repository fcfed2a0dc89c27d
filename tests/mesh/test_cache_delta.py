"""The delta-encoded cache summaries through real replicas: readers that stay, join late or
meet a restarted publisher converge; a worker that leaves has its slots cleared; and hours of
publishing (an injected clock driving the node's upkeep) leave the document bounded."""

from __future__ import annotations

from support.event_log import worker_snapshot

from smg.actors.mesh_upkeep import MeshUpkeep
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.mesh.cache_summary import (
    HASH_BYTES,
    MAX_HASHES,
    SLOT_ITEMS,
    SLOTS,
    CacheSummaries,
    Seen,
    valid_value,
)
from smg.mesh.replica import Replica
from smg.mesh.worker_records import WorkerDirectory
from smg.pipeline.cache_state import CacheAwareState

from .ids import replica


def cache(owner: str, seed: int) -> tuple[Replica, CacheSummaries]:
    r = replica(owner, seed, "cache", valid_value)
    return r, CacheSummaries(r, r.owner)


def sync(a: Replica, b: Replica) -> None:
    """Anti-entropy both ways through state vectors (what a push-pull exchange carries)."""
    b.apply(a.diff(b.state_vector()))
    a.apply(b.diff(a.state_vector()))


def stream(step: int, n: int = 32) -> list[bytes]:
    return [(step * n + i).to_bytes(HASH_BYTES, "big") for i in range(n)]


def test_a_reader_that_stays_learns_deltas_and_a_late_one_converges_by_anti_entropy() -> None:
    a, ca = cache("a@1", 1)
    b, cb = cache("b@1", 2)
    late, clate = cache("c@1", 3)
    seen = Seen()
    learned: set[bytes] = set()
    summary: list[bytes] = []
    sizes = []
    for step in range(120):
        summary[:0] = stream(step)
        del summary[MAX_HASHES:]
        ca.publish("http://e:8000", summary)
        delta = a.take_delta()
        assert delta is not None
        sizes.append(len(delta))
        assert b.apply(delta)
        for url, hashes in cb.changed(seen):
            assert url == "http://e:8000"
            learned.update(hashes)
        assert set(summary) <= learned  # a reader that stays knows the whole summary ...
    # ... from deltas of the new hashes, each re-sent once halfway through its 32 s in the
    # summary (16 slots), not of the whole summary (8 KB)
    assert max(sizes[40:]) < 2 * 32 * HASH_BYTES + 400
    assert set(summary) <= set(cb.imported()["http://e:8000"])
    sync(a, late)  # a reader that joins late
    assert late.digest() == a.digest() == b.digest()
    assert set(summary) <= set(clate.imported()["http://e:8000"])


def test_a_restarted_publisher_converges_and_a_leaving_worker_is_cleared() -> None:
    a, ca = cache("a@1", 1)
    b, cb = cache("b@1", 2)
    ca.publish("u1", stream(0))
    ca.publish("u2", stream(1))
    sync(a, b)
    a2, ca2 = cache("a@2", 1)  # the same node after a restart: a new epoch, an empty ring
    sync(a2, b)
    ca2.publish("u1", stream(5))
    sync(a2, b)
    assert a2.digest() == b.digest()
    assert set(stream(5)) <= set(cb.imported()["u1"])
    assert ca2.retain(["u2"]) == ["u1"]  # u1 left: its slots are cleared
    sync(a2, b)
    assert not any(k.startswith(a2.owner + "/") for k in b.items())
    assert ca2.published() == set()
    ca.publish("u1", [])
    ca.publish("u2", [])
    sync(a, b)
    assert cb.imported() == {}


def test_valid_values() -> None:
    h = b"h" * HASH_BYTES
    assert valid_value("c/u#0", h) and valid_value(f"c/u#{SLOTS - 1}", h)
    assert valid_value("c/u", h * MAX_HASHES)  # a whole summary (nodes before the ring)
    assert not valid_value("c/u#0", h * (SLOT_ITEMS + 1))  # more than a slot
    assert not valid_value(f"c/u#{SLOTS}", h)
    assert not valid_value("c/#0", h) and not valid_value("c/", h)
    assert not valid_value("c/u#0", h[:-1]) and not valid_value("c/u#0", b"")
    assert not valid_value("x/u#0", h)


def test_hours_of_publishing_and_worker_churn_keep_the_document_bounded() -> None:
    """Two simulated hours, a publish a second, 32 new hashes per worker per second, and a
    worker replaced every 20 minutes: the document's size and keys stay flat."""
    a, b = replica("a@1", 1, "cache", valid_value), replica("b@1", 2, "cache", valid_value)
    workers = replica("a@1", 1, "workers")
    state = CacheAwareState()
    cell = SnapshotCell(RegistrySnapshot())
    upkeep = MeshUpkeep(
        replicas={"cache": a, "workers": workers},
        directory=WorkerDirectory(workers, a.owner),
        summaries=CacheSummaries(a, a.owner),
        live_members=lambda: {a.owner, b.owner},
        limiter=None,
        wall=lambda: 0.0,
        cache_publish_interval_s=1.0,
    )
    upkeep.cache_state, upkeep.registry = state, cell
    live = ["w0", "w1"]
    samples: list[tuple[float, int, int]] = []
    for second in range(2 * 3600):
        now = float(second)
        if second % 1200 == 0 and second:
            live = [live[1], f"w{second}"]  # one worker leaves, a new one arrives
        if second % 1200 == 0:
            cell.publish(RegistrySnapshot.build(tuple(worker_snapshot(w) for w in live)))
        for w in live:
            for k in range(2):  # two new 256-character prefixes: 2 x 16 hashes
                state.note(w, f"{w}:{second}:{k}:".ljust(256, "x"))
        upkeep.tick(now)
        delta = a.take_delta()
        if delta is not None:
            b.apply(delta)
        if second % 600 == 599:
            st = a.stats()
            samples.append((now, st["state_bytes"], st["live_keys"]))
    # interleaved overwrites leave ~11 B each (13 KB per 10 minutes here): compaction takes the
    # document back every ~40 minutes (measured: 35 -> 83 KB, then 35 KB again)
    assert a.generation >= 2
    assert all(keys <= 2 * SLOTS for _, _, keys in samples)
    first_hour = max(size for t, size, _ in samples if t < 3600)
    assert max(size for _, size, _ in samples) < 2 * first_hour
    assert max(size for _, size, _ in samples) < 256 * 1024
    sync(a, b)
    assert a.digest() == b.digest()
    got = CacheSummaries(b, b.owner).imported(exclude_owner=b.owner)
    assert set(got) == {f"http://{w}:8000" for w in live}  # the departed workers are cleared


def test_a_reader_looks_only_at_the_keys_that_changed() -> None:
    a, ca = cache("a@1", 1)
    b, cb = cache("b@1", 2)
    for i in range(8):
        ca.publish(f"http://e{i}:8000", stream(i))
    sync(a, b)
    seen = Seen()
    assert len(cb.changed(seen)) == 8  # the first call compares every key
    v = b.version
    ca.publish("http://e3:8000", [*stream(100), *stream(3)])
    delta = a.take_delta()
    assert delta is not None and b.apply(delta)
    touched = b.changed_since(v)
    assert touched is not None and len(touched) == 1  # one slot of one url, not all 8 x 16
    assert cb.changed(seen) == [("http://e3:8000", stream(100))]
    assert cb.changed(seen) == [] and b.changed_since(b.version) == set()
    ca.retain([])  # every url left: their slots go, and the reader forgets them
    sync(a, b)
    assert cb.changed(seen) == [] and seen.raw == {}
    assert b.changed_since(-5) is None  # older than what the journal knows: compare all
