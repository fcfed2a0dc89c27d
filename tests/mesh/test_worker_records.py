from smg.mesh.hlc import HybridClock
from smg.mesh.replica import Replica
from smg.mesh.worker_records import WorkerDirectory, valid_value

from .ids import replica


def node(name: str, seed: int, wall: list[float]) -> tuple[Replica, WorkerDirectory, HybridClock]:
    r = replica(name, seed, "workers", valid_value)
    clock = HybridClock(lambda: wall[0], r.owner)
    return r, WorkerDirectory(r, r.owner, clock), clock


def sync(a: Replica, b: Replica) -> None:
    b.apply(a.diff(b.state_vector()))
    a.apply(b.diff(a.state_vector()))


def test_hlc_is_monotonic_and_passes_observed_stamps() -> None:
    wall = [1.0]
    c = HybridClock(lambda: wall[0], "a")
    t1, t2 = c.now(), c.now()
    assert t1 < t2 and t1[0] == 1000
    c.observe((5000, 3, "b"))  # a peer ahead of our wall clock
    assert c.now() > (5000, 3, "b")
    wall[0] = 0.5  # wall clock steps back
    assert c.now() > t2


def test_remove_on_other_node_wins_when_later_even_with_skewed_clocks() -> None:
    wa, wb = [100.0], [1.0]  # b's wall clock is far behind a's
    a, da, ca = node("a@1", 1, wa)
    b, db, cb = node("b@1", 2, wb)
    da.publish_add("http://w1", {"model_id": "m"}, ca.now())
    sync(a, b)
    assert db.effective() == {"http://w1": {"model_id": "m", "url": "http://w1"}}  # observes a
    db.publish_remove("http://w1", cb.now())
    sync(a, b)
    assert da.effective() == db.effective() == {}
    assert da.removed() == {"http://w1"}
    da.publish_add("http://w1", {"model_id": "m2"}, ca.now())  # re-added after the remove
    sync(a, b)
    assert db.effective() == {"http://w1": {"model_id": "m2", "url": "http://w1"}}


def test_concurrent_add_and_remove_resolve_identically_by_stamp() -> None:
    w = [1.0]
    a, da, _ = node("a@1", 1, w)
    b, db, _ = node("b@1", 2, w)
    da.publish_add("u", {}, (10, 0, a.owner))
    db.publish_remove("u", (10, 0, b.owner))  # same time: node id breaks the tie
    sync(a, b)
    assert da.effective() == db.effective() == {}


def test_dead_nodes_records_survive_compaction_via_adoption() -> None:
    w = [1.0]
    a, da, _ca = node("a@1", 1, w)
    b, db, _ = node("b@1", 2, w)
    d, dd, cd = node("d@1", 3, w)
    dd.publish_add("http://dead-owned", {"priority": 1}, cd.now())
    sync(a, d), sync(b, d), sync(a, b)
    assert da.adopt_orphans({a.owner, b.owner}) == 1
    assert db.adopt_orphans({a.owner, b.owner}) == 1
    a.compact()
    sync(a, b)
    a.release_previous(), b.release_previous()
    want = {"http://dead-owned": {"priority": 1, "url": "http://dead-owned"}}
    assert da.effective() == db.effective() == want
    assert d.owner not in a.owners()
    # the adopters own (and signed) their copies
    assert {k.split("/")[0] for k in a.items()} == {a.owner, b.owner}
