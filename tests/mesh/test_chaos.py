"""Chaos tier in virtual time: real SwimNode cores on the seeded simulated network (LAN profile).

Every scenario is seeded; a failure names the seed and the command that replays it.
`bench/mesh_sim.py` runs the same scenarios over more seeds and prints the distributions."""

import pytest

from smg.mesh.config import MeshConfig
from smg.mesh.messages import Alive, PushPull, State, Stream

from .chaos import (
    ScenarioError,
    all_alive,
    detect_kill,
    false_dead,
    heal_after_partition,
    idle_egress,
    over_seeds,
    pause_resume,
    percentile,
    reproduce,
    restart_new_epoch,
)
from .simnet import SimNet

pytestmark = pytest.mark.chaos  # seeded SWIM simulations over many seeds

# kill -> DEAD on every survivor, p99 over seeds (the targets).
DETECT_P99_S = {3: 9.0, 5: 12.0, 10: 12.0, 20: 14.0}
DETECT_SEEDS = {3: 20, 5: 20, 10: 20, 20: 12}


@pytest.mark.parametrize("n", [3, 5, 10, 20])
def test_kill_is_dead_on_all_survivors_within_target(n: int) -> None:
    times = over_seeds("detect", n, range(DETECT_SEEDS[n]), lambda s: detect_kill(s, n))
    p99 = percentile(list(times.values()), 99)
    worst = max(times, key=lambda s: times[s])
    print(f"detect n={n}: p50 {percentile(list(times.values()), 50):.1f} s, p99 {p99:.1f} s")
    assert p99 <= DETECT_P99_S[n], f"p99 {p99:.1f} s; {reproduce('detect', n, worst)}"


@pytest.mark.parametrize("n", [5, 10])
def test_ten_percent_loss_for_30_minutes_has_no_lasting_false_dead(n: int) -> None:
    seed = 100 + n
    try:
        r = false_dead(seed, n, loss=0.10, duration_s=1800.0)
    except ScenarioError as e:
        pytest.fail(f"{e}; {reproduce('loss', n, seed)}")
    print(f"10% loss n={n}: {r}")
    assert r.lasting_over_2s == 0, f"{r}; {reproduce('loss', n, seed)}"


def test_partition_into_halves_heals_within_10s() -> None:
    times = over_seeds("heal", 10, range(12), lambda s: heal_after_partition(s, 10, 60.0))
    p99 = percentile(list(times.values()), 99)
    worst = max(times, key=lambda s: times[s])
    print(f"heal n=10: p50 {percentile(list(times.values()), 50):.1f} s, p99 {p99:.1f} s")
    assert p99 <= 10.0, f"p99 {p99:.1f} s; {reproduce('heal', 10, worst)}"


@pytest.mark.parametrize("queue", [True, False], ids=["packets-queued", "packets-dropped"])
def test_paused_node_refutes_and_ends_alive_everywhere(queue: bool) -> None:
    scenario = "pause" if queue else "pause-drop"
    times = over_seeds(scenario, 5, range(6), lambda s: pause_resume(s, 5, 20.0, queue))
    print(f"{scenario} n=5: back ALIVE after {sorted(round(t, 1) for t in times.values())} s")


def test_restart_with_new_epoch_replaces_the_old_id_everywhere() -> None:
    times = over_seeds("restart", 10, range(6), lambda s: restart_new_epoch(s, 10))
    print(f"restart n=10: settled after {sorted(round(t, 1) for t in times.values())} s")


def test_idle_egress_under_1kb_per_second_per_node() -> None:
    seed = 7
    e = idle_egress(seed, 10, window_s=300.0)
    print(f"idle n=10: {e}")
    assert e.tcp_bps > 0  # push-pull is counted
    assert e.max_node_bps < 1024, f"{e}; {reproduce('idle', 10, seed)}"


# --- the fault model itself -----------------------------------------------------------------
def _converged(seed: int, n: int, **kw: float) -> SimNet:
    net = SimNet(seed, MeshConfig.lan(), **kw)  # type: ignore[arg-type]
    net.cluster(n)
    assert net.run_until(30.0, lambda: all_alive(net)), f"seed={seed}"
    return net


def test_asymmetric_cut_is_routed_around_without_a_lasting_dead() -> None:
    seed = 21
    net = _converged(seed, 5)
    net.links.cut_one_way("n1", "n2")  # n1 cannot reach n2; n2 -> n1 still works
    worst = 0.0
    while net.now < 300.0:
        net.run_until(net.now + 0.5)
        for obs in net.alive_nodes():
            for m in obs.members().values():
                if m.state == State.DEAD:
                    worst = max(worst, net.now - m.since_s)
    assert worst <= 2.0, f"DEAD for {worst:.1f} s; seed={seed}"
    net.links.heal()
    assert net.run_until(net.now + 30.0, lambda: all_alive(net)), f"seed={seed}"


def test_flapping_duplicating_reordering_links_end_all_alive() -> None:
    seed = 22
    net = _converged(seed, 5, delay_s=(0.001, 0.2), dup=0.05)
    net.links.flap("n0", "n3", period_s=7.0, down_s=3.0, start_s=net.now)
    net.links.flap("n1", "n4", period_s=11.0, down_s=5.0, start_s=net.now)
    net.run_until(net.now + 300.0)
    net.links.heal()
    assert net.run_until(net.now + 30.0, lambda: all_alive(net)), f"seed={seed}"


def test_streams_are_in_order_and_dropped_when_cut() -> None:
    net = SimNet(3, MeshConfig.lan(), delay_s=(0.001, 0.5))
    b = net.add("b")
    got: list[int] = []
    real = b.receive_stream

    def spy(now: float, src: str, msg: PushPull) -> list:  # type: ignore[type-arg]
        got.append(msg.updates[0].incarnation)
        return real(now, src, msg)

    b.receive_stream = spy  # type: ignore[method-assign,assignment]
    for i in range(20):
        net.deliver("a", [Stream("b", PushPull("a", "a", (Alive("a", "a", i),), False))])
    net.run_until(1.0)  # delays up to 0.5 s reorder UDP, never TCP
    net.deliver("a", [Stream("b", PushPull("a", "a", (Alive("a", "a", 98),), False))])
    net.links.partition(["a"], ["b"])  # breaks the connection with 98 in flight
    net.deliver("a", [Stream("b", PushPull("a", "a", (Alive("a", "a", 99),), False))])
    net.run_until(5.0)
    assert got == list(range(20)), got


def test_paused_node_gets_queued_packets_on_resume_or_loses_them() -> None:
    for queue in (True, False):
        net = _converged(5, 3)
        net.pause("n2", queue=queue)
        net.run_until(net.now + 5.0)
        held = net.paused["n2"]
        assert (held is not None and len(held) > 0) if queue else held is None
        net.resume("n2")
        assert "n2" not in net.paused
