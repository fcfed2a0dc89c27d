"""Chaos scenarios on the simulated network: each runs real SwimNode cores in virtual time from
one seed and returns what it measured. Shared by tests/mesh/test_chaos.py and
bench/mesh_sim.py (which prints the distributions over many seeds)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from smg.mesh.config import MeshConfig
from smg.mesh.messages import State

from .simnet import SimNet

CONVERGE_S = 30.0  # a fresh cluster must be all-alive within this


class ScenarioError(AssertionError):
    """A scenario could not reach the state it measures from (a failure in itself)."""


def reproduce(scenario: str, n: int, seed: int) -> str:
    return (
        f"seed={seed}; reproduce: .venv/bin/python bench/mesh_sim.py {scenario} "
        f"--n {n} --seeds 1 --first-seed {seed}"
    )


def all_alive(net: SimNet) -> bool:
    """Every running node sees every running node (and nothing else live) as ALIVE."""
    ids = {n.node_id for n in net.alive_nodes()}
    return all(
        {k for k, m in n.members().items() if m.state == State.ALIVE} == ids
        for n in net.alive_nodes()
    )


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def _converged(seed: int, n: int, cfg: MeshConfig, **net_kw: float) -> SimNet:
    net = SimNet(seed, cfg, **net_kw)  # type: ignore[arg-type]
    net.cluster(n)
    if not net.run_until(CONVERGE_S, lambda: all_alive(net)):
        raise ScenarioError(f"cluster of {n} did not converge in {CONVERGE_S} s")
    net.run_until(net.now + 5.0)  # let the join gossip drain: measure from steady state
    return net


def detect_kill(seed: int, n: int, cfg: MeshConfig | None = None) -> float:
    """Kill one random member; seconds until every survivor holds it DEAD."""
    net = _converged(seed, n, cfg or MeshConfig.lan())
    victim = net.rng.choice(sorted(net.nodes))
    vid = net.nodes[victim].node_id
    net.kill(victim)
    t0 = net.now
    done = net.run_until(
        t0 + 120.0, lambda: all(s.state_of(vid) in (State.DEAD, None) for s in net.alive_nodes())
    )
    if not done:
        raise ScenarioError(f"{victim} not DEAD everywhere 120 s after the kill")
    return net.now - t0


@dataclass(frozen=True, slots=True)
class LossResult:
    dead_episodes: int  # (observer, subject) pairs that went DEAD, although nobody failed
    lasting_over_2s: int  # of which were still DEAD more than 2 s later
    suspect_episodes: int


def false_dead(seed: int, n: int, loss: float = 0.10, duration_s: float = 1800.0) -> LossResult:
    """`loss` on every packet each way for `duration_s`; nobody fails."""
    net = _converged(seed, n, MeshConfig.lan())
    net.links.loss = loss
    end = net.now + duration_s
    dead: dict[tuple[str, str, float], float] = {}  # episode -> longest seen DEAD
    suspect: set[tuple[str, str, float]] = set()
    while net.now < end:
        net.run_until(net.now + 0.5)
        for obs in net.alive_nodes():
            for m in obs.members().values():
                key = (obs.node_id, m.node_id, m.since_s)
                if m.state == State.DEAD:
                    dead[key] = net.now - m.since_s
                elif m.state == State.SUSPECT:
                    suspect.add(key)
    return LossResult(len(dead), sum(1 for d in dead.values() if d > 2.0), len(suspect))


def heal_after_partition(seed: int, n: int = 10, partition_s: float = 60.0) -> float:
    """Split into halves for `partition_s`, heal; seconds until all views are all-alive."""
    net = _converged(seed, n, MeshConfig.lan())
    names = sorted(net.nodes)
    net.links.partition(names[: n // 2], names[n // 2 :])
    net.run_until(net.now + partition_s)
    for obs in net.alive_nodes():  # each side must have declared the other DEAD
        if sum(1 for m in obs.members().values() if m.state == State.DEAD) < n // 2:
            raise ScenarioError("the partition did not make each side DEAD to the other")
    net.links.heal()
    t0 = net.now
    if not net.run_until(t0 + 120.0, lambda: all_alive(net)):
        raise ScenarioError("views not all-alive 120 s after the heal")
    return net.now - t0


def pause_resume(seed: int, n: int, pause_s: float = 20.0, queue: bool = True) -> float:
    """SIGSTOP one member for `pause_s` (long enough to be declared DEAD), then SIGCONT;
    seconds from the resume until it is ALIVE everywhere (it must have refuted)."""
    net = _converged(seed, n, MeshConfig.lan())
    victim = net.rng.choice(sorted(net.nodes))
    node = net.nodes[victim]
    inc = node.incarnation
    net.pause(victim, queue=queue)
    net.run_until(net.now + pause_s)
    if any(s.state_of(node.node_id) == State.ALIVE for s in net.alive_nodes()):
        raise ScenarioError(f"{victim} still ALIVE somewhere after a {pause_s} s pause")
    net.resume(victim)
    t0 = net.now
    if not net.run_until(t0 + 120.0, lambda: all_alive(net)):
        raise ScenarioError(f"{victim} not ALIVE everywhere 120 s after resuming")
    if node.incarnation <= inc:
        raise ScenarioError(f"{victim} came back without refuting (incarnation {inc})")
    return net.now - t0


def restart_new_epoch(seed: int, n: int) -> float:
    """Crash one member and restart it at once with a new epoch id at the same address;
    seconds until the new id is ALIVE everywhere and the old one DEAD or forgotten."""
    net = _converged(seed, n, MeshConfig.lan())
    victim = net.rng.choice(sorted(net.nodes)[1:])
    old_id = net.nodes[victim].node_id
    net.kill(victim)
    net.run_until(net.now + 2.0)  # not yet detected: the past life is still ALIVE out there
    new = net.restart(victim, epoch=1, seeds=("n0",))
    t0 = net.now

    def settled() -> bool:
        return all_alive(net) and all(
            s.state_of(old_id) in (State.DEAD, None) for s in net.alive_nodes()
        )

    if not net.run_until(t0 + 120.0, settled):
        raise ScenarioError(f"{new.node_id} did not replace {old_id} everywhere in 120 s")
    return net.now - t0


@dataclass(frozen=True, slots=True)
class Egress:
    udp_bps: float  # per node, mean
    tcp_bps: float
    max_node_bps: float


def idle_egress(seed: int, n: int = 10, window_s: float = 300.0) -> Egress:
    """Steady-state bytes per second per node, UDP and push-pull TCP (exact encoded bytes)."""
    net = _converged(seed, n, MeshConfig.lan())
    net.run_until(net.now + 60.0)
    before = {k: dict(v) for k, v in net.bytes_out.items()}
    net.run_until(net.now + window_s)
    udp = [net.bytes_out[k]["udp"] - before.get(k, {}).get("udp", 0) for k in net.nodes]
    tcp = [net.bytes_out[k]["tcp"] - before.get(k, {}).get("tcp", 0) for k in net.nodes]
    per_node = [(u + t) / window_s for u, t in zip(udp, tcp, strict=True)]
    return Egress(sum(udp) / n / window_s, sum(tcp) / n / window_s, max(per_node))


def over_seeds(
    scenario: str, n: int, seeds: range, run: Callable[[int], float]
) -> dict[int, float]:
    """Run `run(seed)` for each seed; a failing seed fails the test with its replay command."""
    import pytest

    out: dict[int, float] = {}
    for seed in seeds:
        try:
            out[seed] = run(seed)
        except ScenarioError as e:
            pytest.fail(f"{e}; {reproduce(scenario, n, seed)}")
    return out
