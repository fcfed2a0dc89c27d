import pytest

from smg.mesh.messages import State

from .simnet import SimNet


def _all_alive(net: SimNet) -> bool:
    names = set(net.nodes)
    return all(
        {k for k, m in n.members().items() if m.state == State.ALIVE} == names
        for n in net.alive_nodes()
    )


@pytest.mark.parametrize("n", [3, 5])
def test_cluster_converges_to_all_alive(n: int) -> None:
    net = SimNet(seed=n)
    net.cluster(n)
    assert net.run_until(10.0, lambda: _all_alive(net))
    net.run_until(net.now + 30.0)
    assert _all_alive(net)


def _detect_failure(seed: int) -> float:
    net = SimNet(seed=seed)
    net.cluster(5)
    net.run_until(10.0)
    assert _all_alive(net)
    t0 = net.now
    net.down.add("n4")
    done = net.run_until(
        t0 + 60.0, lambda: all(n.state_of("n4") == State.DEAD for n in net.alive_nodes())
    )
    assert done
    return net.now - t0


def test_failed_node_declared_dead_by_all_survivors() -> None:
    times = [_detect_failure(seed) for seed in range(5)]
    # bound: a probe round (<= n-1 probe intervals) + max suspicion (24 s at n=5) + gossip
    assert max(times) < 4 * 1.0 + 24.0 + 2.0, times
    print(f"detection times (simulated s, n=5, LAN profile): {[round(t, 1) for t in times]}")


def test_falsely_suspected_node_refutes_with_higher_incarnation() -> None:
    net = SimNet(seed=7)
    net.cluster(5)
    net.run_until(10.0)
    net.node_loss["n2"] = 0.9
    suspected = net.run_until(
        60.0, lambda: any(n.state_of("n2") == State.SUSPECT for n in net.alive_nodes())
    )
    assert suspected
    net.node_loss.clear()
    net.run_until(net.now + 10.0)
    assert net.nodes["n2"].incarnation >= 1
    for n in net.alive_nodes():
        m = n.members()["n2"]
        assert m.state == State.ALIVE
        assert m.incarnation == net.nodes["n2"].incarnation


def test_graceful_leave_is_left_not_dead() -> None:
    net = SimNet(seed=11)
    net.cluster(5)
    net.run_until(10.0)
    net.deliver("n3", net.nodes["n3"].leave(net.now))
    net.run_until(net.now + 2.0)
    net.down.add("n3")
    net.run_until(net.now + 60.0)
    for n in net.alive_nodes():
        assert n.state_of("n3") == State.LEFT


def test_ten_percent_loss_has_no_lasting_false_dead() -> None:
    net = SimNet(seed=3, loss=0.10)
    net.cluster(5)
    net.run_until(20.0)
    dead_samples = 0
    while net.now < 320.0:
        net.run_until(net.now + 5.0)
        dead_samples += sum(
            1 for n in net.alive_nodes() for m in n.members().values() if m.state == State.DEAD
        )
    net.run_until(net.now + 30.0)
    assert _all_alive(net)
    print(f"10% loss, 300 simulated s: DEAD observations in 5 s samples = {dead_samples}")


def test_answers_to_unknown_addresses_carry_no_gossip() -> None:
    """A replayed Ping from a spoofed source draws an Ack no larger than the Ping."""
    import random

    from smg.mesh.config import MeshConfig
    from smg.mesh.messages import Ack, Alive, Compound, Ping
    from smg.mesh.swim import SwimNode

    node = SwimNode("a@1", "10.0.0.1:1", MeshConfig.test(), random.Random(0))
    node.merge(0.0, tuple(Alive(f"n{i}@1", f"10.0.0.{i + 2}:1", 1) for i in range(5)))
    stranger = node.receive(0.1, "192.0.2.9:9", Ping(7, "a@1"))
    assert [e.message for e in stranger] == [Ack(7)]
    member = node.receive(0.2, "10.0.0.2:1", Ping(8, "a@1"))
    assert isinstance(member[0].message, Compound)  # members still get the piggybacked gossip


@pytest.mark.parametrize("seed", range(4))
def test_a_seed_that_starts_after_its_joiners_have_met_is_still_joined(seed: int) -> None:
    """n1 and n2 start first (n1's seed is n0; n2's are n0 and n1) and meet each other; n0, the
    seed both name, starts seconds later with no seeds of its own. Meeting one seed must not
    end the joins to the others: the three converge (the netns test's order, slowed down)."""
    net = SimNet(seed=seed)
    net.add("n1", ("n0",))
    net.add("n2", ("n0", "n1"))
    assert net.run_until(5.0, lambda: "n1" in net.nodes["n2"].members())
    net.run_until(net.now + 5.0)
    net.add("n0")
    assert net.run_until(net.now + 60.0, lambda: _all_alive(net))


def test_seeds_added_while_running_are_joined_once_and_kept_until_met() -> None:
    """Discovery's router pods: `add_seeds` joins the new ones only (not itself, not members,
    not seeds already pending), and the rejoin timer keeps them with the configured seeds."""
    import random

    from smg.mesh.config import MeshConfig
    from smg.mesh.messages import Alive, Join
    from smg.mesh.swim import SwimNode

    node = SwimNode("a@1", "10.0.0.1:1", MeshConfig.test(), random.Random(0))
    node.join(0.0, ["10.0.0.9:1"])
    node.merge(0.0, (Alive("b@1", "10.0.0.2:1", 1),))
    sent = node.add_seeds(0.1, ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.9:1"])
    assert [(e.addr, type(e.message)) for e in sent] == [("10.0.0.3:1", Join)]
    assert node.add_seeds(0.2, ["10.0.0.3:1"]) == []
    assert node._join_seeds == ["10.0.0.9:1", "10.0.0.3:1"]
