"""State-level chaos tier in virtual time: every simulated node runs the real node's wiring
(SWIM + Replication + WorkerDirectory + HLC + rate limiter, see statenet.py) under loss, delay,
duplicates, partitions, crashes and flapping links; a Jepsen-style checker judges the end state.

Every scenario is seeded; a failure names the seed and the command that replays it.
`bench/mesh_sim.py state-heal` (and state-loss, state-crash, state-flap, state-rl) runs the same
scenarios over more seeds and prints the distributions."""

import pytest

from smg.mesh.messages import Stream, StreamMessage

from .chaos import ScenarioError, all_alive, over_seeds, percentile, reproduce
from .statenet import (
    WORKERS,
    StateNet,
    Workload,
    converged,
    rate_limit_split,
    settle,
    state_crash,
    state_flap,
    state_heal,
    state_loss,
)

pytestmark = pytest.mark.chaos  # seeded state-level simulations under injected faults

HEAL_P99_S = 15.0  # halves healed -> replicated documents identical, N=10


def test_loss_delay_dup_lose_no_acknowledged_write() -> None:
    times = over_seeds("state-loss", 5, range(3), lambda s: state_loss(s, 5))
    print(f"state-loss n=5: identical {sorted(round(t, 2) for t in times.values())} s after")


def test_partition_into_halves_heals_to_identical_documents_within_target() -> None:
    times = over_seeds("state-heal", 10, range(4), lambda s: state_heal(s, 10, 60.0))
    xs = list(times.values())
    worst = max(times, key=lambda s: times[s])
    p99 = percentile(xs, 99)
    print(f"state-heal n=10: p50 {percentile(xs, 50):.2f} s, p99 {p99:.2f} s, max {max(xs):.2f}")
    assert p99 <= HEAL_P99_S, f"p99 {p99:.1f} s; {reproduce('state-heal', 10, worst)}"


@pytest.mark.parametrize("down_s", [15.0, 1.0], ids=["declared-dead", "back-before-detected"])
def test_crashed_node_restarts_with_a_new_epoch_relearns_and_its_writes_survive(
    down_s: float,
) -> None:
    times = over_seeds("state-crash", 5, range(3), lambda s: state_crash(s, 5, down_s))
    print(f"state-crash n=5: identical {sorted(round(t, 2) for t in times.values())} s after")


def test_flapping_links_lose_no_acknowledged_write() -> None:
    times = over_seeds("state-flap", 5, range(2), lambda s: state_flap(s, 5))
    print(f"state-flap n=5: identical {sorted(round(t, 2) for t in times.values())} s after")


def test_rate_limit_holds_while_connected_and_per_side_when_partitioned() -> None:
    seed, limit = 3, 100
    r = rate_limit_split(seed, limit=limit, offered_per_s=200.0, phase_s=12)
    print(
        f"state-rl L={limit}, 3 x 200 req/s: connected {r.connected}; "
        f"{{n0}} {r.alone} | {{n1, n2}} {r.pair}; healed {r.healed}"
    )
    again = reproduce("state-rl", 3, seed)
    assert max(r.connected + r.healed) <= 1.1 * limit, f"{r}; {again}"
    assert max(r.alone) <= limit and max(r.pair) <= limit, f"{r}; {again}"
    assert min(r.connected[1:]) >= 0.9 * limit, f"{r}; {again}"  # and the limit is usable
    assert r.alone[-1] >= 0.9 * limit and r.pair[-1] >= 0.9 * limit, f"{r}; {again}"


# --- the tier itself --------------------------------------------------------------------------
def test_restart_is_a_new_epoch_with_fresh_replicas() -> None:
    net = converged(11, 3)
    old = net.state["n2"]
    net.kill("n2")
    net.restart("n2", epoch=1, seeds=("n0",))
    new = net.state["n2"]
    assert old.node_id.startswith("n2@0.") and new.node_id.startswith("n2@1.")
    assert new.replicas[WORKERS].client_id != old.replicas[WORKERS].client_id
    assert new.replicas[WORKERS].items() == {}
    assert new.skew_s == old.skew_s  # the host's clock, not the process's


def test_the_checker_sees_a_node_that_drops_document_updates() -> None:
    """Not vacuous: break one node's replication and the scenario must fail."""
    net = converged(12, 3)
    deaf = net.state["n1"]

    def drop(src: str, msg: StreamMessage) -> tuple[list[Stream], set[str]]:
        return [], set()

    deaf.replication.receive = drop  # type: ignore[method-assign]
    wl = Workload(net)
    wl.run(net.now + 10.0)
    with pytest.raises(ScenarioError, match="not identical"):
        settle(wl)


def test_statenet_keeps_simnet_semantics_for_membership() -> None:
    net = StateNet(13)
    net.cluster(4)
    assert net.run_until(30.0, lambda: all_alive(net))
    assert all(
        len(s.live_addrs()) == 3 and s.replication.live == s.live_addrs() for s in net.running()
    )
