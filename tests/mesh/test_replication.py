"""The replication core: deltas to live members, contact repair, anti-entropy, bad bytes."""

from __future__ import annotations

import random

from smg.mesh.messages import DocUpdate, DocVector, Stream
from smg.mesh.replica import Replica
from smg.mesh.replication import Replication

from .ids import replica as make_replica


def node(name: str, seed: int) -> tuple[Replica, Replication]:
    replica = make_replica(name, seed)
    return replica, Replication({"ns": replica}, random.Random(seed), sync_interval_s=5.0)


def deliver(effects: list[Stream], nodes: dict[str, Replication], src: str) -> None:
    """Deliver until quiet (answers included)."""
    queue = [(src, e) for e in effects]
    while queue:
        frm, e = queue.pop(0)
        out, _ = nodes[e.addr].receive(frm, e.message)
        queue += [(e.addr, x) for x in out]


def test_local_writes_reach_live_members_as_deltas() -> None:
    ra, a = node("a", 1)
    rb, b = node("b", 2)
    a.tick(0.0, frozenset({"b"}))  # contact: vectors only, nothing written yet
    ra.put("w1", {"url": "http://x"})
    effects = a.tick(0.1, frozenset({"b"}))
    assert [type(e.message) for e in effects] == [DocUpdate]
    changed = b.receive("a", effects[0].message)[1]
    assert changed == {"ns"} and rb.items() == ra.items()
    assert a.tick(0.2, frozenset({"b"})) == []  # nothing new, no anti-entropy due yet


def test_contact_repairs_both_sides() -> None:
    ra, a = node("a", 1)
    rb, b = node("b", 2)
    ra.put("only-a", 1)
    rb.put("only-b", 2)
    ra.take_delta()
    rb.take_delta()  # the deltas were "lost": only contact repair can bring them across
    effects = a.set_live(frozenset({"b"}))
    assert [type(e.message) for e in effects] == [DocVector]
    deliver(effects, {"a": a, "b": b}, "a")
    assert ra.digest() == rb.digest()
    assert set(ra.items()) == {f"{ra.owner}/only-a", f"{rb.owner}/only-b"}


def test_anti_entropy_picks_a_live_member_every_interval() -> None:
    _, a = node("a", 1)
    a.set_live(frozenset({"b", "c"}))
    sent = []
    for step in range(200):  # 20 s
        sent += [e.addr for e in a.tick(step * 0.1, frozenset({"b", "c"}))]
    assert 3 <= len(sent) <= 5 and set(sent) <= {"b", "c"}


def test_bad_bytes_are_counted_not_raised() -> None:
    ra, a = node("a", 1)
    out, changed = a.receive("b", DocUpdate("ns", b"\x00garbage"))
    assert (out, changed, dict(a.rejected)) == ([], set(), {("ns", "malformed"): 1})
    out, _ = a.receive("b", DocVector("ns", b"\xff\xfe", True))
    assert out == [] and a.rejected[("ns", "malformed")] == 2
    assert a.receive("b", DocUpdate("unknown-namespace", b"x")) == ([], set())
    assert ra.items() == {}


def test_a_peer_a_generation_ahead_is_asked_for_its_state_not_believed() -> None:
    ra, a = node("a", 1)
    rb, b = node("b", 2)
    ra.put("x", 1)
    ra.compact()  # a is in generation 1, b still in 0
    ra.take_delta()  # lost: b must learn generation 1 from a's signed state
    # a's (unsigned) state vector names generation 1: b answers with its own vector, no diff
    out, _ = b.receive("a", DocVector("ns", ra.state_vector(), True))
    assert [type(e.message) for e in out] == [DocVector] and rb.generation == 0
    deliver(out, {"a": a, "b": b}, "b")  # a answers with its full, signed state
    assert rb.generation == 1 and rb.items() == ra.items()
