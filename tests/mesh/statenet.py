"""The simulated network one level up: every node runs the real node's wiring, not just SWIM.

A `StateNet` node is what `smg/actors/mesh_node.py` + `smg/app/mesh.py` build: a SwimNode,
a `Replication` over the replicas {"workers", "rate_limits"}, a `WorkerDirectory` stamping with a
`HybridClock` (wall = virtual time + a per-host skew) and optionally a `ClusterRateLimiter`. It
is driven the way MeshNode drives it: a tick every `tick_s` runs swim.tick, limiter.flush and
replication.tick(now, live addrs); a change of the member view calls replication.set_live; a
PushPull stream goes to SWIM, a DocVector/DocUpdate to the Replication. A local write reads the
directory first (as MeshSyncActor has after every change), so the HLC has observed peers' stamps.

Node ids carry epochs like the real ones (``addr@epoch``): a restart is a new process with a new
epoch, fresh replicas (fresh pycrdt client ids) and no state; it must re-learn everything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from smg.mesh import rate_limit, worker_records
from smg.mesh.config import MeshConfig
from smg.mesh.identity import NodeIdentity
from smg.mesh.messages import Effect, Message, PushPull, State, StreamMessage
from smg.mesh.rate_limit import ClusterRateLimiter
from smg.mesh.replica import Replica
from smg.mesh.replication import Replication
from smg.mesh.swim import SwimNode
from smg.mesh.worker_records import HybridClock, Stamp, WorkerDirectory

from .chaos import ScenarioError, all_alive
from .checker import NodeView, WorkerOp, check
from .simnet import SimNet

WORKERS, RATE_LIMITS = "workers", "rate_limits"
VALIDATORS = {WORKERS: worker_records.valid_value, RATE_LIMITS: rate_limit.valid_value}
_LIVE = (State.ALIVE, State.SUSPECT)
View = tuple[tuple[str, State, int], ...]


@dataclass(frozen=True, slots=True)
class RateLimitSpec:
    limit: int  # admitted per window, cluster-wide
    window_s: float = 1.0


@dataclass(slots=True)
class StateNode:
    """One gateway process: its layers over the SwimNode (which SimNet keeps in `nodes`)."""

    addr: str
    swim: SwimNode
    replicas: dict[str, Replica]
    replication: Replication
    hlc: HybridClock
    directory: WorkerDirectory
    limiter: ClusterRateLimiter | None
    skew_s: float
    next_tick_s: float
    view: View = ()

    @property
    def node_id(self) -> str:
        return self.swim.node_id

    def live_addrs(self) -> frozenset[str]:
        return frozenset(
            m.addr
            for m in self.swim.members().values()
            if m.state in _LIVE and m.node_id != self.node_id
        )

    def live_nodes(self) -> int:
        """MeshView.live_nodes: live members counting this one."""
        return max(1, sum(1 for m in self.swim.members().values() if m.state in _LIVE))

    def digest(self) -> str:
        return self.replicas[WORKERS].digest()


class StateNet(SimNet):
    def __init__(
        self,
        seed: int,
        cfg: MeshConfig | None = None,
        loss: float = 0.0,
        delay_s: tuple[float, float] = (0.001, 0.01),
        dup: float = 0.0,
        check_s: float = 0.05,
        tick_s: float = 0.05,
        sync_interval_s: float = 5.0,
        max_skew_s: float = 0.0,
        rate_limit: RateLimitSpec | None = None,
    ) -> None:
        super().__init__(seed, cfg, loss, delay_s, dup, check_s)
        self.tick_s = tick_s  # MeshNode's tick
        self.sync_interval_s = sync_interval_s  # MeshNode's doc_sync_interval_s
        self.max_skew_s = max_skew_s
        self.rate_limit = rate_limit
        self.state: dict[str, StateNode] = {}  # by address, the current process
        self._skew: dict[str, float] = {}  # per host: survives restarts
        self._srng = random.Random(self.rng.random())  # our own draws: SimNet's stay as they were

    # --- processes ---------------------------------------------------------------------------
    def node_id(self, addr: str, epoch: int | None) -> str:
        """A fresh key pair every boot; the id names it (as GatewayMesh's do)."""
        rng = self._srng
        self._skew.setdefault(addr, rng.uniform(-self.max_skew_s, self.max_skew_s))
        doc_rng = random.Random(rng.getrandbits(64))  # a fresh identity every boot
        name = addr if epoch is None else f"{addr}@{epoch}"
        self._identity = NodeIdentity.generate(name, doc_rng)
        return self._identity.node_id

    def _started(self, addr: str, node: SwimNode) -> None:
        rng = self._srng
        skew = self._skew[addr]
        identity = self._identity
        assert identity.node_id == node.node_id
        replicas = {ns: Replica(ns, identity, VALIDATORS[ns]) for ns in (WORKERS, RATE_LIMITS)}
        hlc = HybridClock(lambda: self.now + skew, node.node_id)
        limiter = None
        if self.rate_limit is not None:
            limiter = ClusterRateLimiter(
                replicas[RATE_LIMITS], node.node_id, self.rate_limit.limit, self.rate_limit.window_s
            )
        self.state[addr] = StateNode(
            addr=addr,
            swim=node,
            replicas=replicas,
            replication=Replication(replicas, random.Random(rng.random()), self.sync_interval_s),
            hlc=hlc,
            directory=WorkerDirectory(replicas[WORKERS], node.node_id, clock=hlc),
            limiter=limiter,
            skew_s=skew,
            next_tick_s=self.now + rng.uniform(0, self.tick_s),  # ticks are not in step
        )

    def cluster(self, n: int) -> list[SwimNode]:
        """n0..n{n-1}, first epoch ("n3@0"), all joining through n0."""
        first = self.add("n0", epoch=0)
        return [first, *(self.add(f"n{i}", ("n0",), epoch=0) for i in range(1, n))]

    def running(self) -> list[StateNode]:
        return [s for a, s in self.state.items() if a not in self.down and a not in self.paused]

    def wall(self, addr: str) -> float:
        return self.now + self.state[addr].skew_s

    # --- the MeshNode handlers ---------------------------------------------------------------
    def _next_wake_s(self, addr: str, node: SwimNode) -> float:
        return self.state[addr].next_tick_s

    def _on_tick(self, addr: str, node: SwimNode) -> list[Effect]:
        s = self.state[addr]
        while s.next_tick_s <= self.now:
            s.next_tick_s += self.tick_s
        out = node.tick(self.now)
        if s.limiter is not None:
            s.limiter.flush(self.wall(addr))
        out += s.replication.tick(self.now, s.live_addrs())
        return out + self._view_changed(s)

    def _on_packet(self, addr: str, node: SwimNode, src: str, msg: Message) -> list[Effect]:
        s = self.state[addr]
        return node.receive(self.now, src, msg) + self._view_changed(s)

    def _on_stream(self, addr: str, node: SwimNode, src: str, msg: StreamMessage) -> list[Effect]:
        s = self.state[addr]
        out: list[Effect] = []
        if isinstance(msg, PushPull):
            out += node.receive_stream(self.now, src, msg)
        else:
            effects, _changed = s.replication.receive(src, msg)
            out += effects  # (the sync actor's reconcile reads the directory: see add_worker)
        return out + self._view_changed(s)

    def _view_changed(self, s: StateNode) -> list[Effect]:
        view = tuple(
            (m.node_id, m.state, m.incarnation)
            for m in sorted(s.swim.members().values(), key=lambda m: m.node_id)
        )
        if view == s.view:
            return []
        s.view = view
        return list(s.replication.set_live(s.live_addrs()))

    # --- what an operator / a client does on one node ----------------------------------------
    def add_worker(self, addr: str, url: str, spec: dict[str, object]) -> Stamp:
        """`POST /workers` on `addr`: acknowledged once the local write happened. The directory
        is read first, as MeshSyncActor has after every change, so the HLC has observed every
        stamp this node holds."""
        s = self.state[addr]
        s.directory.effective()
        ts = s.hlc.now()
        s.directory.publish_add(url, spec, ts)
        return ts

    def remove_worker(self, addr: str, url: str) -> Stamp:
        s = self.state[addr]
        s.directory.effective()
        ts = s.hlc.now()
        s.directory.publish_remove(url, ts)
        return ts

    def acquire(self, addr: str, caller: str) -> bool:
        """One request through `addr`'s rate-limit middleware."""
        s = self.state[addr]
        assert s.limiter is not None
        return s.limiter.try_acquire(caller, self.wall(addr), s.live_nodes())

    def holds(self, addr: str, owner: str, url: str, ts: Stamp) -> bool:
        """`addr`'s replica has `owner`'s record of `url` at `ts` or a later one of its."""
        raw = self.state[addr].replicas[WORKERS].get(f"{owner}/w/{url}")
        return isinstance(raw, list) and len(raw) == 3 and tuple(raw[2]) >= ts

    def identical(self) -> bool:
        """Every running node holds the same worker document."""
        return len({s.digest() for s in self.running()}) == 1


# --- scenarios: shared by tests/mesh/test_state_chaos.py and bench/mesh_sim.py -------------------
CONVERGE_S = 30.0
SETTLE_S = 60.0  # after the heal / the last write, the documents must be identical within this
QUIET_S = 10.0  # then this much more before the checker looks
MAX_SKEW_S = 0.5  # host clocks: wall = virtual time + uniform(-skew, skew)
OPS_PER_S = 2.0


class Workload:
    """Random worker adds / removes / re-adds on random running nodes, as an operator would issue
    them (a remove or re-add names a url that node currently shows), recorded as a history.
    Acknowledged = the local write happened; a crashed node's writes that no other node held at
    the crash are indeterminate (`maybe`): they may still be in flight, or lost."""

    def __init__(self, net: StateNet) -> None:
        self.net = net
        self.rng = random.Random(net.rng.random())
        self.ops: list[WorkerOp] = []
        self.maybe: list[WorkerOp] = []
        self._urls = 0

    def step(self, addr: str | None = None) -> None:
        s = self.net.state[addr] if addr is not None else self.rng.choice(self.net.running())
        shown = sorted(s.directory.effective())
        removed = sorted(s.directory.removed())
        r = self.rng.random()
        if r < 0.3 and shown:
            url = self.rng.choice(shown)
            self.ops.append(WorkerOp("remove", url, self.net.remove_worker(s.addr, url), s.node_id))
            return
        if r < 0.4 and removed:
            url = self.rng.choice(removed)
        else:
            url = f"http://w{self._urls}:8000"
            self._urls += 1
        ts = self.net.add_worker(s.addr, url, {"url": url, "model": "m"})
        self.ops.append(WorkerOp("add", url, ts, s.node_id))

    def run(self, until_s: float, per_s: float = OPS_PER_S) -> None:
        while True:
            t = self.net.now + self.rng.expovariate(per_s)
            if t >= until_s:
                self.net.run_until(until_s)
                return
            self.net.run_until(t)
            self.step()

    def crash(self, addr: str) -> None:
        victim = self.net.state[addr].node_id
        others = [a for a in self.net.state if a != addr and a not in self.net.down]
        for op in [op for op in self.ops if op.node == victim]:
            if not any(self.net.holds(a, victim, op.url, op.ts) for a in others):
                self.ops.remove(op)
                self.maybe.append(op)
        self.net.kill(addr)

    def violations(self) -> list[str]:
        views = [
            NodeView(s.node_id, s.digest(), s.directory.effective()) for s in self.net.running()
        ]
        return check(views, self.ops, maybe=self.maybe)


def converged(seed: int, n: int, **kw: object) -> StateNet:
    net = StateNet(seed, MeshConfig.lan(), **kw)  # type: ignore[arg-type]
    net.cluster(n)
    if not net.run_until(CONVERGE_S, lambda: all_alive(net)):
        raise ScenarioError(f"cluster of {n} did not converge in {CONVERGE_S} s")
    net.run_until(net.now + 2.0)
    return net


def settle(wl: Workload) -> float:
    """Seconds until every running node holds the same document; then a quiet period and the
    checker (its violations raise)."""
    net = wl.net
    t0 = net.now
    if not net.run_until(t0 + SETTLE_S, net.identical):
        raise ScenarioError(f"documents not identical {SETTLE_S} s after the last fault/write")
    took = net.now - t0
    net.run_until(net.now + QUIET_S)
    bad = wl.violations()
    if bad:
        raise ScenarioError(f"{len(bad)} violations: " + "; ".join(bad[:4]))
    return took


def state_loss(seed: int, n: int = 5, duration_s: float = 30.0) -> float:
    """5% UDP loss, 1-100 ms delays (reordering), 5% duplicates, skewed clocks; writes for
    `duration_s`; seconds from the last write until the documents are identical."""
    kw = {"loss": 0.05, "delay_s": (0.001, 0.1), "dup": 0.05, "max_skew_s": MAX_SKEW_S}
    net = converged(seed, n, **kw)
    wl = Workload(net)
    wl.run(net.now + duration_s)
    return settle(wl)


def state_heal(seed: int, n: int = 10, partition_s: float = 60.0) -> float:
    """Halves for `partition_s` with writes on both sides, then heal: seconds from the heal until
    the replicated documents are identical everywhere."""
    net = converged(seed, n, max_skew_s=MAX_SKEW_S)
    wl = Workload(net)
    wl.run(net.now + 5.0)
    names = sorted(net.nodes)
    net.links.partition(names[: n // 2], names[n // 2 :])
    wl.run(net.now + partition_s)
    if net.identical():
        raise ScenarioError("the two sides hold the same document after the partition")
    net.links.heal()
    return settle(wl)


def state_crash(seed: int, n: int = 5, down_s: float = 15.0) -> float:
    """Writes everywhere; one node crashes, stays down `down_s`, restarts with a new epoch and
    empty replicas; writes go on (on it too). Seconds from the last write until identical; the
    checker holds the dead epoch's delivered writes to survive."""
    net = converged(seed, n, max_skew_s=MAX_SKEW_S)
    wl = Workload(net)
    wl.run(net.now + 10.0)
    victim = net.rng.choice(sorted(net.nodes)[1:])
    wl.step(victim)  # acknowledged, but the crash comes before the next tick ships it: lost
    wl.crash(victim)
    wl.run(net.now + down_s)
    net.restart(victim, epoch=1, seeds=("n0",))
    wl.run(net.now + 15.0)
    return settle(wl)


def state_flap(seed: int, n: int = 5, duration_s: float = 60.0) -> float:
    """Two links flapping (7 s period 3 s down, 11 s period 5 s down), 1-200 ms delays, 5%
    duplicates, writes throughout; heal; seconds until identical."""
    net = converged(seed, n, delay_s=(0.001, 0.2), dup=0.05, max_skew_s=MAX_SKEW_S)
    net.links.flap("n0", "n3", period_s=7.0, down_s=3.0, start_s=net.now)
    net.links.flap("n1", "n4", period_s=11.0, down_s=5.0, start_s=net.now)
    wl = Workload(net)
    wl.run(net.now + duration_s)
    net.links.heal()
    return settle(wl)


@dataclass(frozen=True, slots=True)
class RateResult:
    limit: int
    connected: list[int]  # admitted per window, summed over the 3 nodes
    alone: list[int]  # partitioned: {n0}
    pair: list[int]  # partitioned: {n1, n2}
    healed: list[int]


def rate_limit_split(
    seed: int,
    limit: int = 100,
    offered_per_s: float = 200.0,
    delay_s: tuple[float, float] = (0.01, 0.05),
    phase_s: int = 20,
) -> RateResult:
    """3 nodes, each offered `offered_per_s` of one caller's requests; the counters travel as
    deltas over the simulated TCP. `phase_s` windows connected, then {n0} | {n1, n2}, then
    healed (the first windows after the heal are left out while membership re-forms)."""
    net = converged(seed, 3, delay_s=delay_s, rate_limit=RateLimitSpec(limit, 1.0))
    net.run_until(float(int(net.now) + 1))  # start on a window boundary (no skew here)

    def load(windows: int) -> dict[str, list[int]]:
        t0 = net.now
        per = {a: [0] * windows for a in net.state}
        for i in range(int(windows * offered_per_s)):
            net.run_until(t0 + i / offered_per_s)
            w = int(net.now - t0)
            for s in net.running():
                if net.acquire(s.addr, "tenant"):
                    per[s.addr][w] += 1
        net.run_until(t0 + windows)
        return per

    def total(per: dict[str, list[int]], addrs: tuple[str, ...]) -> list[int]:
        return [sum(col) for col in zip(*(per[a] for a in addrs), strict=True)]

    connected = load(phase_s)
    net.links.partition(["n0"], ["n1", "n2"])
    split = load(phase_s)
    net.links.heal()
    net.run_until(net.now + 15.0)  # SWIM heals within ~10 s; then the counters flow again
    healed = load(phase_s)
    every = ("n0", "n1", "n2")
    return RateResult(
        limit,
        total(connected, every),
        total(split, ("n0",)),
        total(split, ("n1", "n2")),
        total(healed, every),
    )
