"""Unit tests of the SWIM core's anti-entropy and lifecycle rules, driven by hand (no network):
push-pull merge and answer, refuting a merged accusation, periodic push-pull, reconnect to the
dead, reaping, epoch replacement, join over TCP."""

import random
from dataclasses import replace

import pytest

from smg.mesh.config import MeshConfig
from smg.mesh.membership import epoch_of, push_pull_scale
from smg.mesh.messages import (
    Ack,
    Alive,
    Compound,
    Dead,
    Effect,
    Join,
    Leave,
    Ping,
    PushPull,
    Send,
    State,
    Stream,
    Suspect,
)
from smg.mesh.swim import SwimNode

CFG = MeshConfig.lan()


def _node(node_id: str = "a", cfg: MeshConfig = CFG) -> SwimNode:
    node = SwimNode(node_id, node_id.split("@")[0], cfg, random.Random(1))
    node.tick(0.0)
    return node


def _run(node: SwimNode, start: float, end: float) -> list[Effect]:
    """Tick at every deadline in [start, end); nothing ever answers."""
    out: list[Effect] = []
    now = start
    while now < end:
        out += node.tick(now)
        now = max(now + 1e-6, node.next_deadline_s())
    return out


def _push_pulls(effects: list[Effect]) -> list[Stream]:
    return [e for e in effects if isinstance(e, Stream) and isinstance(e.message, PushPull)]


def test_push_pull_merges_and_answers_with_its_table() -> None:
    a = _node()
    table = (Alive("b", "b", 3), Alive("c", "c", 0), Leave("d", 0))
    out = a.receive_stream(1.0, "b", PushPull("b", "b", table, True))
    assert a.state_of("b") == State.ALIVE and a.members()["b"].incarnation == 3
    assert a.state_of("c") == State.ALIVE
    assert a.state_of("d") is None  # an unknown member's leave adds nothing
    [answer] = _push_pulls(out)
    assert answer.addr == "b" and not answer.message.reply  # type: ignore[union-attr]
    assert Alive("a", "a", 0) in answer.message.updates  # type: ignore[union-attr]
    assert a.receive_stream(2.0, "b", PushPull("b", "b", table, False)) == []


def test_remote_dead_only_makes_us_suspect() -> None:
    a = _node()
    a.receive_stream(1.0, "b", PushPull("b", "b", (Alive("b", "b", 0), Alive("c", "c", 0)), False))
    a.receive_stream(2.0, "b", PushPull("b", "b", (Dead("c", 0, "b"),), False))
    assert a.state_of("c") == State.SUSPECT  # our own timer decides, c may refute


def test_merged_state_saying_we_are_dead_makes_us_refute() -> None:
    a = _node()
    out = a.receive_stream(
        1.0, "b", PushPull("b", "b", (Alive("b", "b", 0), Dead("a", 0, "b")), True)
    )
    assert a.incarnation == 1
    [answer] = _push_pulls(out)
    assert Alive("a", "a", 1) in answer.message.updates  # type: ignore[union-attr]


@pytest.mark.parametrize("claim", [Suspect("a", 0, "b"), Leave("a", 0)])
def test_merged_suspect_or_leave_about_us_is_refuted(claim: Suspect | Leave) -> None:
    a = _node()
    a.receive_stream(1.0, "b", PushPull("b", "b", (claim,), False))
    assert a.incarnation == 1 and a.state_of("a") == State.ALIVE


def test_stale_accusation_about_us_is_ignored() -> None:
    a = _node()
    a.receive(1.0, "b", Suspect("a", 0, "b"))
    assert a.incarnation == 1
    a.receive(2.0, "b", Suspect("a", 0, "c"))  # older than what we already refuted
    a.receive(2.0, "b", Dead("a", 0, "c"))
    assert a.incarnation == 1


def test_join_is_answered_over_tcp_and_stops_the_join_retries() -> None:
    seed, joiner = _node("s"), _node("j")
    joiner.join(0.0, ["s"])
    out = seed.receive(0.1, "j", Join("j", "j", 0))
    [answer] = _push_pulls(out)
    assert answer.addr == "j" and not answer.message.reply  # type: ignore[union-attr]
    retries = [e for e in _run(joiner, 0.0, 6.0) if isinstance(e, Send) and e.addr == "s"]
    assert any(isinstance(e.message, Join) for e in retries)
    joiner.receive_stream(6.0, "s", answer.message)
    assert joiner.state_of("s") == State.ALIVE
    later = [e for e in _run(joiner, 6.0, 12.0) if isinstance(e, Send)]
    assert not any(isinstance(e.message, Join) for e in later)


def test_periodic_push_pull_goes_to_one_live_member_per_interval() -> None:
    a = _node(cfg=replace(CFG, push_pull_interval_s=1.0))
    a.receive_stream(0.0, "b", PushPull("b", "b", (Alive("b", "b", 0),), False))
    a.receive_stream(0.0, "c", PushPull("c", "c", (Alive("c", "c", 0),), False))
    pps = _push_pulls(_run(a, 0.0, 3.01))  # before anyone could be declared DEAD
    assert len(pps) == 3
    assert all(p.message.reply for p in pps)  # type: ignore[union-attr]
    assert {p.addr for p in pps} <= {"b", "c"}


@pytest.mark.parametrize(("n", "mult"), [(1, 1), (32, 1), (33, 2), (64, 2), (65, 3), (1000, 6)])
def test_push_pull_scale(n: int, mult: int) -> None:
    assert push_pull_scale(30.0, n) == pytest.approx(30.0 * mult)


def _with_dead_member(cfg: MeshConfig = CFG) -> SwimNode:
    a = _node(cfg=cfg)
    a.receive(0.0, "b", Alive("b", "b", 0))
    a.receive(0.0, "l", Alive("l", "l", 0))
    a.receive(1.0, "x", Dead("b", 0, "x"))
    a.receive(1.0, "x", Leave("l", 0))
    assert a.state_of("b") == State.DEAD and a.state_of("l") == State.LEFT
    return a


def test_reconnect_pushes_to_dead_not_left_members() -> None:
    a = _with_dead_member()
    pps = _push_pulls(_run(a, 1.0, 1.0 + 3 * CFG.reconnect_interval_s))
    assert {p.addr for p in pps} == {"b"}
    assert len(pps) >= 2  # one DEAD and nobody else alive: every interval


def test_dead_and_left_are_reaped_after_dead_reclaim_and_no_longer_reconnected() -> None:
    cfg = replace(CFG, dead_reclaim_s=60.0)
    a = _with_dead_member(cfg)
    _run(a, 1.0, 61.5)
    assert a.state_of("b") is None and a.state_of("l") is None
    assert _push_pulls(_run(a, 61.5, 100.0)) == []


def test_a_revived_member_brings_the_next_push_pull_forward() -> None:
    a = _with_dead_member()
    a.receive(2.0, "b", Alive("b", "b", 1))
    assert a.state_of("b") == State.ALIVE
    pps: list[Stream] = []
    now = 2.0
    while now < 2.0 + 3.01 * CFG.probe_interval_s:  # b answers every ping
        for e in a.tick(now):
            if isinstance(e, Send) and isinstance(e.message, Compound | Ping):
                parts = e.message.parts if isinstance(e.message, Compound) else (e.message,)
                for ping in (p for p in parts if isinstance(p, Ping)):
                    a.receive(now + 0.001, "b", Ack(ping.seq))
            pps += _push_pulls([e])
        now = max(now + 1e-6, a.next_deadline_s())
    assert [p.addr for p in pps] == ["b"]  # not up to push_pull_interval_s later


@pytest.mark.parametrize(("node_id", "epoch"), [("n1@7", 7), ("n1", -1), ("a@b@3", 3), ("x@", -1)])
def test_epoch_of(node_id: str, epoch: int) -> None:
    assert epoch_of(node_id) == epoch


def test_newer_epoch_at_same_address_replaces_the_old_at_once() -> None:
    a = _node()
    a.receive(0.0, "b", Alive("b@1", "b", 4))
    a.receive(1.0, "c", Suspect("b@1", 4, "c"))
    assert a.state_of("b@1") == State.SUSPECT
    a.receive(2.0, "b", Alive("b@2", "b", 0))
    assert a.state_of("b@1") is None  # no lingering suspicion of the past life
    assert a.state_of("b@2") == State.ALIVE
    _run(a, 2.0, 60.0)  # and no suspicion timer left behind to fire
    # the past life never wins back its address, whatever its incarnation
    a.receive(61.0, "c", Alive("b@1", "b", 9))
    assert a.state_of("b@1") is None


def test_an_older_epoch_never_displaces_ourselves_or_a_newer_one() -> None:
    a = _node("a@5")
    a.receive(0.0, "x", Alive("a@4", "a", 3))
    assert a.state_of("a@4") is None
    a.receive(0.0, "b", Alive("b@2", "b", 0))
    a.receive(0.0, "x", Alive("b@1", "b", 0))
    assert a.state_of("b@1") is None and a.state_of("b@2") == State.ALIVE


def test_next_deadline_is_within_a_probe_interval() -> None:
    a = _node()
    a.receive(0.0, "b", Alive("b", "b", 0))
    now = 0.0
    for _ in range(50):
        a.tick(now)
        nxt = a.next_deadline_s()
        assert now < nxt <= now + CFG.gossip_interval_s + 1e-9
        now = nxt


def test_profiles() -> None:
    assert MeshConfig.profile("lan") == MeshConfig.lan()
    assert MeshConfig.profile("local").push_pull_interval_s == 15.0
    assert MeshConfig.profile("test").push_pull_interval_s == 2.0
    assert MeshConfig.lan().push_pull_interval_s == 30.0
    with pytest.raises(ValueError, match="wan"):
        MeshConfig.profile("wan")
