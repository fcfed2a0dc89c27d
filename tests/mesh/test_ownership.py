"""Ownership of replicated keys (finding 2 of issue 10): an insider holding the cluster key forges
writes to another node's keys in every way a Yjs update allows; each is refused before it is
merged, with a reason, and the owner's value stays. Legitimate traffic (deltas in any order,
relays, compactions) is never refused."""

from __future__ import annotations

import random
import time
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Map
from support.examples import examples

from smg.mesh import rate_limit, worker_records
from smg.mesh import yupdate as y
from smg.mesh.replica import RejectedUpdate, Replica, decode_update, encode_update

from .ids import identity, replica


def pack(v: Any) -> bytes:
    return msgpack.packb(v, use_bin_type=True)


def sync(a: Replica, b: Replica) -> None:
    """Anti-entropy both ways (a diff is None when the asker is a generation ahead)."""
    for _ in range(2):
        for x, z in ((a, b), (b, a)):
            d = x.diff(z.state_vector())
            if d is not None:
                z.apply(d)


def shadow(of: Replica, client_id: int) -> tuple[Doc, Map, list[bytes]]:
    """A raw pycrdt doc holding what `of` holds, writing as `client_id`: an insider's tool."""
    doc = Doc(client_id=client_id)
    doc.apply_update(decode_update(of.diff(encode_update(of.generation, b"\x00")) or b"")[1])
    updates: list[bytes] = []
    doc.observe(lambda e: updates.append(bytes(e.update)))
    return doc, doc.get("m", type=Map), updates


def victim_and_target() -> tuple[Replica, Replica, str]:
    """B owns a worker record; A (the honest target) holds it."""
    b = replica("b@1", 2, "workers", worker_records.valid_value)
    a = replica("a@1", 1, "workers", worker_records.valid_value)
    b.put("w/http://w1", ["add", {"url": "http://w1", "model_id": "m"}, [1, 0, b.owner]])
    sync(b, a)
    return a, b, f"{b.owner}/w/http://w1"


def refused(a: Replica, update: bytes, reason: str) -> None:
    before = (a.state_vector(), a.items())
    with pytest.raises(RejectedUpdate) as err:
        a.apply(encode_update(a.generation, update))
    assert err.value.reason == reason, err.value
    assert (a.state_vector(), a.items()) == before  # nothing of it was merged


FORGED = pack(["remove", None, [2**40, 0, "mallory"]])


def test_an_unsigned_overwrite_of_anothers_key_is_refused() -> None:
    a, _, key = victim_and_target()
    _, m, ups = shadow(a, 4242)
    m[key] = FORGED  # what the finding did: re-point another node's worker record
    refused(a, ups[-1], "unsigned")
    assert a.get(key)[0] == "add"


def test_an_insider_signing_anothers_key_with_its_own_key_is_refused() -> None:
    a, _, key = victim_and_target()
    mallory = identity("mallory@1", 9)
    client = mallory.client_id("workers", 0)
    _, m, ups = shadow(a, client)
    m[key] = mallory.seal_value("workers", 0, client, 0, key, pack(["remove", None, [9, 0, "x"]]))
    refused(a, ups[-1], "not_owner")


def test_the_owners_own_signature_cannot_be_moved_to_another_key_or_clock() -> None:
    a, b, key = victim_and_target()
    envelope = bytes(shadow(a, 1)[1][key])
    # the same signed bytes under another key of b's
    _, m, ups = shadow(a, 4243)
    m[f"{b.owner}/w/http://evil"] = envelope
    refused(a, ups[-1], "not_owner")  # client 4243 is not b's
    # ... or under b's own client id at a later clock (squatting b's future writes)
    _, m, ups = shadow(a, b.client_id)
    m[key] = envelope
    refused(a, ups[-1], "bad_signature")


def test_deleting_the_owners_current_value_is_refused() -> None:
    a, _, key = victim_and_target()
    _, m, ups = shadow(a, 4244)
    del m[key]
    refused(a, ups[-1], "forbidden_delete")


def test_gc_structs_and_foreign_root_types_are_refused() -> None:
    a, b, _ = victim_and_target()
    gc_squat = bytes([1, 1]) + y_uint(b.client_id) + y_uint(1) + bytes([0]) + y_uint(10**6)
    refused(a, gc_squat + bytes([0]), "malformed")
    doc = Doc(client_id=4245)
    ups: list[bytes] = []
    doc.observe(lambda e: ups.append(bytes(e.update)))
    doc.get("other", type=Map)["x"] = b"1"
    refused(a, ups[-1], "malformed")


def y_uint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_malformed_value_signed_by_its_owner_is_refused() -> None:
    """The second half of finding 2: a rate-limit counter whose counts are not ints made
    requests 500. Its owner may write its key, but not an invalid value."""
    a = replica("a@1", 1, "rate_limits", rate_limit.valid_value)
    m = replica("m@1", 3, "rate_limits")  # the insider's replica: no validator of its own
    for bad in (
        [5, {"caller": "x"}, None],
        [5, {"caller": -1}, None],
        [5, {"caller": 2**40}, None],
        [2**60, {}, None],
        [5, {str(i): 1 for i in range(rate_limit.MAX_CALLERS + 1)}, None],
        "not a list",
    ):
        m.put("rl", bad)
        with pytest.raises(RejectedUpdate) as err:
            a.apply(m.diff(a.state_vector()) or b"")
        assert err.value.reason == "invalid_value"
    m.put("rl", [5, {"caller": 3}, {"caller": 2}])
    a.apply(m.diff(a.state_vector()) or b"")
    assert a.get(f"{m.owner}/rl") == [5, {"caller": 3}, {"caller": 2}]


def test_worker_records_carrying_a_key_or_bad_types_are_refused() -> None:
    a = replica("a@1", 1, "workers", worker_records.valid_value)
    m = replica("m@1", 3, "workers")
    url = "http://w"
    for spec in (
        {"url": url, "api_key": "sk-leak"},
        {"url": "http://elsewhere"},
        {"url": url, "priority": "high"},
        {"url": url, "labels": [["k"]]},
        {"url": url, "bootstrap_port": 70000},
    ):
        m.put(f"w/{url}", ["add", spec, [1, 0, "m"]])
        with pytest.raises(RejectedUpdate):
            a.apply(m.diff(a.state_vector()) or b"")
    assert a.items() == {}


def test_relayed_and_out_of_order_updates_are_accepted() -> None:
    b, relay, a = replica("b@1", 2), replica("r@1", 3), replica("a@1", 1)
    b.put("x", 1)
    d1 = b.take_delta()
    b.put("x", 2)
    d2 = b.take_delta()
    b.put("y", 3)
    d3 = b.take_delta()
    assert d1 and d2 and d3
    for d in (d1, d2, d3):
        relay.apply(d)
    assert not a.apply(d3) and not a.apply(d2)  # overtook their predecessors: kept, waiting
    assert a.apply(d1)  # ... and applied once it arrives
    assert a.items() == b.items()
    c = replica("c@1", 4)
    c.apply(relay.diff(c.state_vector()) or b"")  # b's signed items, forwarded by a third node
    assert c.items() == b.items()


def test_a_newer_generation_is_adopted_only_on_a_signed_items_word() -> None:
    a, b = replica("a@1", 1), replica("b@1", 2)
    b.put("x", 1)
    sync(a, b)
    assert a.diff(encode_update(7, b"\x00")) is None  # an unsigned vector: not adopted
    assert a.generation == 0
    doc = Doc(client_id=99)
    ups: list[bytes] = []
    doc.observe(lambda e: ups.append(bytes(e.update)))
    doc.get("m", type=Map)[f"{b.owner}/"] = pack(7)
    with pytest.raises(RejectedUpdate):
        a.apply(encode_update(7, ups[-1]))
    assert a.generation == 0
    b.compact()
    a.apply(b.take_delta() or b"")
    assert a.generation == 1 and a.get(f"{b.owner}/x") == 1


def test_own_writes_are_indexed_at_the_ids_pycrdt_gives_them() -> None:
    r = replica("a@1", 1)
    for i in range(20):
        r.put(f"k{i % 3}", i)
        r.delete("k1")
    r.compact()
    r.put("z", 1)
    for raw in (r.diff(encode_update(r.generation, b"\x00")) or b"",):
        for s in y.decode(decode_update(raw)[1]).structs:
            assert r._index.key_at(s.client, s.clock) is not None


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)), max_size=40))
def test_legitimate_traffic_in_any_order_is_never_refused(ops: list[tuple[int, int, int]]) -> None:
    rng = random.Random(len(ops))
    reps = [replica(f"n{i}@1", i, "workers", worker_records.valid_value) for i in range(3)]
    wire: list[tuple[int, bytes]] = []
    for who, k, action in ops:
        r = reps[who]
        url = f"http://w{k}"
        if action == 3:
            r.delete(f"w/{url}")
        elif action == 2 and rng.random() < 0.2:
            r.compact()
        else:
            r.put(f"w/{url}", ["add", {"url": url, "priority": action}, [len(wire), 0, r.owner]])
        d = r.take_delta()
        if d:
            wire += [(dst, d) for dst in range(3) if dst != who]
        rng.shuffle(wire)
        while wire and rng.random() < 0.5:
            dst, data = wire.pop()
            reps[dst].apply(data)  # raises RejectedUpdate on a false positive
    for _ in range(3):
        for x in reps:
            for z in reps:
                if x is not z:
                    sync(x, z)
    assert len({r.digest() for r in reps}) == 1


def test_cost_of_checking_an_update(capsys: pytest.CaptureFixture[str]) -> None:
    """Off the request path, but measured: a delta, and a full state of a realistic document."""
    b, a = replica("b@1", 2, "workers"), replica("a@1", 1, "workers")
    for i in range(100):  # 100 worker records
        b.put(f"w/http://10.0.0.{i}:8000", ["add", {"url": f"http://10.0.0.{i}:8000"}, [i, 0, "b"]])
    full = b.diff(a.state_vector()) or b""
    t0 = time.perf_counter()
    a.apply(full)
    full_s = time.perf_counter() - t0
    n, total = 50, 0.0
    for i in range(n):
        b.put("w/http://10.0.0.1:8000", ["add", {"url": "http://10.0.0.1:8000"}, [i, 1, "b"]])
        d = b.take_delta() or b""
        t0 = time.perf_counter()
        a.apply(d)
        total += time.perf_counter() - t0
    with capsys.disabled():
        print(
            f"\n  guarded apply: delta {total / n * 1e6:.0f} us, "
            f"full state of 100 records ({len(full)} B) {full_s * 1e3:.1f} ms"
        )
    assert a.items() == b.items()
