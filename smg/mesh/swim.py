"""The sans-IO SWIM + Lifeguard node: feed it time and packets, it returns effects.

No sockets, no clock, no asyncio: the driver calls `tick(now)` periodically and
`receive(now, sender_addr, message)` per packet, and performs the returned `Send`s."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from smg.mesh.awareness import Awareness
from smg.mesh.broadcast_queue import BroadcastQueue
from smg.mesh.config import MeshConfig
from smg.mesh.messages import (
    Ack,
    Alive,
    Compound,
    Dead,
    Effect,
    Join,
    Leave,
    Member,
    Message,
    Nack,
    Ping,
    PingReq,
    Send,
    State,
    StateSync,
    Suspect,
    Update,
    approx_size,
)
from smg.mesh.suspicion import Suspicion, confirmations_wanted, suspicion_bounds_s

_GONE = (State.DEAD, State.LEFT)
_PART_OVERHEAD = 2


@dataclass(slots=True)
class _Probe:
    target: str
    seq: int
    direct_deadline_s: float  # ask helpers after this
    deadline_s: float  # probe failed if still unacked now
    acked: bool = False
    helpers: int = 0
    nacks: int = 0


@dataclass(slots=True)
class _Relay:
    """A ping-req we are serving: forward the target's ack, or nack on timeout."""

    requester_addr: str
    requester_seq: int
    nack_at_s: float


class SwimNode:
    def __init__(self, node_id: str, addr: str, cfg: MeshConfig, rng: random.Random) -> None:
        self.node_id = node_id
        self.addr = addr
        self.cfg = cfg
        self.rng = rng
        self.incarnation = 0
        self.awareness = Awareness(cfg.awareness_max_multiplier)
        self.leaving = False
        self._members: dict[str, Member] = {node_id: Member(node_id, addr, State.ALIVE, 0, 0.0)}
        self._suspicions: dict[str, Suspicion] = {}
        self._queue: BroadcastQueue[Update] = BroadcastQueue(cfg.retransmit_mult)
        self._order: list[str] = []
        self._order_idx = 0
        self._seq = 0
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._next_probe_s: float | None = None
        self._next_gossip_s: float | None = None
        self._join_seeds: list[str] = []  # re-sent each probe interval until a StateSync

    # --- views -------------------------------------------------------------------------------
    def members(self) -> dict[str, Member]:
        return dict(self._members)

    def state_of(self, node_id: str) -> State | None:
        m = self._members.get(node_id)
        return m.state if m else None

    def _live_count(self) -> int:
        return sum(1 for m in self._members.values() if m.state not in _GONE)

    # --- commands ----------------------------------------------------------------------------
    def join(self, now: float, seed_addrs: list[str]) -> list[Effect]:
        """Announce ourselves to seeds; each replies with its full member table."""
        self._join_seeds = [a for a in seed_addrs if a != self.addr]
        msg = Join(self.node_id, self.addr, self.incarnation)
        return [Send(a, msg) for a in self._join_seeds]

    def leave(self, now: float) -> list[Effect]:
        """Graceful leave: gossip a Leave; the driver keeps ticking briefly, then stops."""
        self.leaving = True
        self._set(now, self.node_id, State.LEFT, self.incarnation)
        self._broadcast(Leave(self.node_id, self.incarnation))
        return self._gossip_round(now)

    # --- time --------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self._next_probe_s is None:
            self._next_probe_s = now + self.rng.uniform(0, self.cfg.probe_interval_s)
            self._next_gossip_s = now + self.rng.uniform(0, self.cfg.gossip_interval_s)
        self._tick_relays(now, out)
        if not self.leaving:
            if self._join_seeds and now >= self._next_probe_s:
                out.extend(self.join(now, self._join_seeds))
            self._tick_probe(now, out)
            self._tick_suspicions(now)
        assert self._next_gossip_s is not None
        if now >= self._next_gossip_s:
            self._next_gossip_s = now + self.cfg.gossip_interval_s
            out.extend(self._gossip_round(now))
        return out

    def _tick_relays(self, now: float, out: list[Effect]) -> None:
        for seq, r in list(self._relays.items()):
            if now >= r.nack_at_s:
                del self._relays[seq]
                out.append(Send(r.requester_addr, Nack(r.requester_seq)))

    def _tick_probe(self, now: float, out: list[Effect]) -> None:
        p = self._probe
        if p is not None and not p.acked:
            if p.helpers == 0 and now >= p.direct_deadline_s:
                self._ask_helpers(p, out)
            if now >= p.deadline_s:
                self._probe_failed(now, p)
                self._probe = None
        assert self._next_probe_s is not None
        if now >= self._next_probe_s:
            self._next_probe_s = now + self.awareness.scale(self.cfg.probe_interval_s)
            self._start_probe(now, out)

    def _ask_helpers(self, p: _Probe, out: list[Effect]) -> None:
        target = self._members.get(p.target)
        if target is None:
            return
        pool = [
            m
            for m in self._members.values()
            if m.state == State.ALIVE and m.node_id not in (self.node_id, p.target)
        ]
        helpers = self.rng.sample(pool, min(self.cfg.indirect_checks, len(pool)))
        p.helpers = len(helpers) if helpers else -1  # -1: asked, but nobody to ask
        for h in helpers:
            out.append(self._send(h.addr, PingReq(p.seq, p.target, target.addr)))

    def _probe_failed(self, now: float, p: _Probe) -> None:
        # Lifeguard: missing nacks suggest *we* are the slow/lossy one.
        if p.helpers > 0:
            self.awareness.apply(max(0, p.helpers - p.nacks))
        else:
            self.awareness.apply(1)
        m = self._members.get(p.target)
        if m is not None and m.state not in _GONE:
            self._on_suspect(now, Suspect(m.node_id, m.incarnation, self.node_id))

    def _start_probe(self, now: float, out: list[Effect]) -> None:
        target = self._next_target()
        if target is None:
            return
        self._seq += 1
        self._probe = _Probe(
            target.node_id,
            self._seq,
            now + self.awareness.scale(self.cfg.probe_timeout_s),
            now + self.awareness.scale(self.cfg.probe_interval_s),
        )
        ping: Message = Ping(self._seq, target.node_id)
        if target.state == State.SUSPECT:
            # Lifeguard "buddy system": tell a suspect directly so it can refute at once.
            ping = Compound((ping, Suspect(target.node_id, target.incarnation, self.node_id)))
        out.append(self._send(target.addr, ping))

    def _next_target(self) -> Member | None:
        for _ in range(2):
            while self._order_idx < len(self._order):
                m = self._members.get(self._order[self._order_idx])
                self._order_idx += 1
                if m is not None and m.state not in _GONE:
                    return m
            self._order = [k for k, m in self._members.items() if k != self.node_id]
            self.rng.shuffle(self._order)
            self._order_idx = 0
        return None

    def _tick_suspicions(self, now: float) -> None:
        for node, s in list(self._suspicions.items()):
            if now >= s.deadline_s:
                m = self._members[node]
                self._on_dead(now, Dead(node, m.incarnation, self.node_id))

    def _gossip_round(self, now: float) -> list[Effect]:
        recent = now - self.cfg.gossip_to_the_dead_s
        pool = [
            m
            for m in self._members.values()
            if m.node_id != self.node_id
            and (m.state not in _GONE or (m.state == State.DEAD and m.since_s >= recent))
        ]
        out: list[Effect] = []
        for m in self.rng.sample(pool, min(self.cfg.gossip_nodes, len(pool))):
            parts = self._piggyback(0)
            if not parts:
                break
            out.append(Send(m.addr, parts[0] if len(parts) == 1 else Compound(tuple(parts))))
        return out

    # --- packets -----------------------------------------------------------------------------
    def receive(self, now: float, sender_addr: str, message: Message) -> list[Effect]:
        out: list[Effect] = []
        self._handle(now, sender_addr, message, out)
        return out

    def _handle(self, now: float, sender: str, msg: Message, out: list[Effect]) -> None:
        match msg:
            case Compound(parts):
                for part in parts:
                    self._handle(now, sender, part, out)
            case Ping(seq, target):
                if target == self.node_id and not self.leaving:
                    out.append(self._send(sender, Ack(seq)))
            case PingReq(seq, target, target_addr):
                self._seq += 1
                self._relays[self._seq] = _Relay(
                    sender, seq, now + 0.8 * self.awareness.scale(self.cfg.probe_timeout_s)
                )
                out.append(self._send(target_addr, Ping(self._seq, target)))
            case Ack(seq):
                relay = self._relays.pop(seq, None)
                if relay is not None:
                    out.append(self._send(relay.requester_addr, Ack(relay.requester_seq)))
                p = self._probe
                if p is not None and p.seq == seq and not p.acked:
                    p.acked = True
                    self.awareness.apply(-1 if p.helpers == 0 else 0)
            case Nack(seq):
                p = self._probe
                if p is not None and p.seq == seq:
                    p.nacks += 1
            case Join(node, addr, inc):
                self._on_alive(now, Alive(node, addr, inc))
                snapshot = tuple(self._as_update(m) for m in self._members.values())
                out.append(Send(sender, StateSync(snapshot)))
            case StateSync(updates):
                self._join_seeds = []
                for u in updates:
                    self._handle(now, sender, u, out)
            case Alive():
                self._on_alive(now, msg)
            case Suspect():
                self._on_suspect(now, msg)
            case Dead():
                self._on_dead(now, msg)
            case Leave():
                self._on_leave(now, msg)

    # --- SWIM precedence ---------------------------------------------------------------------
    def _on_alive(self, now: float, u: Alive) -> None:
        if u.node == self.node_id:
            if u.incarnation > self.incarnation and not self.leaving:
                self._refute(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is not None and u.incarnation <= m.incarnation:
            return
        if m is None or m.state in _GONE:
            self._order.insert(self.rng.randint(self._order_idx, len(self._order)), u.node)
        self._suspicions.pop(u.node, None)
        self._members[u.node] = Member(u.node, u.addr, State.ALIVE, u.incarnation, now)
        self._broadcast(u)

    def _on_suspect(self, now: float, u: Suspect) -> None:
        if u.node == self.node_id:
            if not self.leaving:
                self._refute(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is None or u.incarnation < m.incarnation or m.state in _GONE:
            return
        s = self._suspicions.get(u.node)
        if m.state == State.SUSPECT and s is not None:
            if u.incarnation == m.incarnation and s.confirm(u.from_node):
                self._broadcast(u)  # Lifeguard: spread independent confirmations
            return
        n = self._live_count()
        low, high = suspicion_bounds_s(
            n,
            self.cfg.probe_interval_s,
            self.cfg.suspicion_mult,
            self.cfg.suspicion_max_timeout_mult,
        )
        k = confirmations_wanted(self.cfg.suspicion_mult, n)
        self._suspicions[u.node] = Suspicion(now, k, low, high, {u.from_node})
        self._set(now, u.node, State.SUSPECT, u.incarnation)
        self._broadcast(u)

    def _on_dead(self, now: float, u: Dead) -> None:
        if u.node == self.node_id:
            if not self.leaving:
                self._refute(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is None or u.incarnation < m.incarnation or m.state in _GONE:
            return
        self._suspicions.pop(u.node, None)
        self._set(now, u.node, State.DEAD, u.incarnation)
        self._broadcast(u)

    def _on_leave(self, now: float, u: Leave) -> None:
        m = self._members.get(u.node)
        if u.node == self.node_id or m is None or u.incarnation < m.incarnation:
            return
        if m.state in _GONE:
            return
        self._suspicions.pop(u.node, None)
        self._set(now, u.node, State.LEFT, u.incarnation)
        self._broadcast(u)

    def _refute(self, heard_incarnation: int) -> None:
        """Only a node raises its own incarnation: out-bid the accusation and say so."""
        self.incarnation = max(self.incarnation, heard_incarnation) + 1
        self._set(None, self.node_id, State.ALIVE, self.incarnation)
        self._broadcast(Alive(self.node_id, self.addr, self.incarnation))
        self.awareness.apply(1)  # Lifeguard: being suspected hints we are the slow one

    # --- helpers -----------------------------------------------------------------------------
    def _set(self, now: float | None, node: str, state: State, inc: int) -> None:
        m = self._members[node]
        since = m.since_s if now is None else now
        self._members[node] = replace(m, state=state, incarnation=inc, since_s=since)

    def _broadcast(self, u: Update) -> None:
        self._queue.push(u.node, u, approx_size(u))

    def _piggyback(self, used: int) -> list[Message]:
        return list(
            self._queue.take(self._live_count(), _PART_OVERHEAD, self.cfg.max_packet_bytes - used)
        )

    def _send(self, addr: str, msg: Message) -> Send:
        extra = self._piggyback(approx_size(msg))
        if not extra:
            return Send(addr, msg)
        return Send(addr, Compound((msg, *extra)))

    def _as_update(self, m: Member) -> Update:
        match m.state:
            case State.ALIVE:
                return Alive(m.node_id, m.addr, m.incarnation)
            case State.SUSPECT:
                return Suspect(m.node_id, m.incarnation, self.node_id)
            case State.DEAD:
                return Dead(m.node_id, m.incarnation, self.node_id)
            case _:
                return Leave(m.node_id, m.incarnation)
