"""The sans-IO SWIM + Lifeguard node: feed it time and packets, it returns effects.

No sockets, no clock, no asyncio: the driver calls `tick(now)` by `next_deadline_s()` (or
periodically) and `receive(now, sender_addr, message)` per packet or stream message, and performs
the returned `Send`s (UDP) and `Stream`s (TCP). The member table and SWIM's precedence rules live
in membership.py; this module is the protocol: probes, gossip, join, push-pull, reconnect."""

from __future__ import annotations

import random
from dataclasses import dataclass

from smg.mesh.config import MeshConfig
from smg.mesh.membership import GONE, Membership, push_pull_scale
from smg.mesh.messages import (
    MAX_COMPOUND_PARTS,
    PACKET_ENVELOPE_BYTES,
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
    PushPull,
    Send,
    State,
    StateSync,
    Stream,
    StreamMessage,
    Suspect,
    approx_size,
)

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


class SwimNode(Membership):
    def __init__(self, node_id: str, addr: str, cfg: MeshConfig, rng: random.Random) -> None:
        super().__init__(node_id, addr, cfg, rng)
        self._order: list[str] = []
        self._order_idx = 0
        self._seq = 0
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._next_probe_s: float | None = None
        self._next_gossip_s = 0.0
        self._next_push_pull_s = 0.0
        self._next_reconnect_s = 0.0
        # seeds not met yet: joined again each probe interval while this node is alone, then
        # each reconnect interval until every one is a member (one met seed does not end the
        # joins to the others: nodes started before their seed would form a cluster without it)
        self._join_seeds: list[str] = []

    # --- commands ----------------------------------------------------------------------------
    def join(self, now: float, seed_addrs: list[str]) -> list[Effect]:
        """Announce ourselves to seeds (UDP); each answers with its table over TCP."""
        self._join_seeds = [a for a in seed_addrs if a != self.addr]
        # memberlist's setAlive: gossip our own Alive too, so members the seed's
        # retransmissions missed still hear of us once we know them.
        self._broadcast(Alive(self.node_id, self.addr, self.incarnation))
        msg = Join(self.node_id, self.addr, self.incarnation)
        return [Send(a, msg) for a in self._join_seeds]

    def add_seeds(self, now: float, seed_addrs: list[str]) -> list[Effect]:
        """More seeds while running (pods found by discovery): the ones not met yet are joined
        now and kept with the others until met."""
        known = {m.addr for m in self._members.values()}
        new = [a for a in seed_addrs if a != self.addr and a not in known]
        new = [a for a in dict.fromkeys(new) if a not in self._join_seeds]
        if not new:
            return []
        self._join_seeds = [*self._join_seeds, *new]
        msg = Join(self.node_id, self.addr, self.incarnation)
        return [Send(a, msg) for a in new]

    def leave(self, now: float) -> list[Effect]:
        """Graceful leave: gossip a Leave; the driver keeps ticking briefly, then stops."""
        self.leaving = True
        self._set(now, self.node_id, State.LEFT, self.incarnation)
        self._broadcast(Leave(self.node_id, self.incarnation))
        return self._gossip_round(now)

    # --- time --------------------------------------------------------------------------------
    def next_deadline_s(self) -> float:
        """When `tick` next has work to do (0.0 before the first tick)."""
        if self._next_probe_s is None:
            return 0.0
        times = [self._next_gossip_s, *(r.nack_at_s for r in self._relays.values())]
        if not self.leaving:
            times += (self._next_probe_s, self._next_push_pull_s, self._next_reconnect_s)
            times += (s.deadline_s for s in self._suspicions.values())
            p = self._probe
            if p is not None and not p.acked:
                times.append(p.deadline_s if p.helpers else p.direct_deadline_s)
        return min(times)

    def tick(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self._next_probe_s is None:
            # Stagger every timer so nodes started together do not beat in step.
            self._next_probe_s = now + self.rng.uniform(0, self.cfg.probe_interval_s)
            self._next_gossip_s = now + self.rng.uniform(0, self.cfg.gossip_interval_s)
            self._next_push_pull_s = now + self.rng.uniform(0, self._push_pull_interval_s())
            self._next_reconnect_s = now + self.rng.uniform(0, self.cfg.reconnect_interval_s)
        self._tick_relays(now, out)
        if not self.leaving:
            if self._join_seeds and now >= self._next_probe_s and self._alone():
                out.extend(self._rejoin(now))
            self._tick_probe(now, out)
            self._tick_suspicions(now)
            self._tick_anti_entropy(now, out)
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
            self._reap(now)
            self._start_probe(now, out)

    def _ask_helpers(self, p: _Probe, out: list[Effect]) -> None:
        target = self._members.get(p.target)
        if target is None:
            p.helpers = -1
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
        if m is not None and m.state not in GONE:
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

    def _on_new_member(self, now: float, node: str, revived: bool) -> None:
        # memberlist inserts a new member at a random place in the probe order.
        self._order.insert(self.rng.randint(self._order_idx, len(self._order)), node)
        if revived:
            # A DEAD member is back: most likely a partition healed, and the refutations that
            # crossed it were gossiped while half the cluster was still DEAD to the other
            # half. Do the next push-pull soon instead of up to push_pull_interval_s later.
            soon = now + self.rng.uniform(1.0, 3.0) * self.cfg.probe_interval_s
            self._next_push_pull_s = min(self._next_push_pull_s, soon)

    def _next_target(self) -> Member | None:
        for _ in range(2):
            while self._order_idx < len(self._order):
                m = self._members.get(self._order[self._order_idx])
                self._order_idx += 1
                if m is not None and m.state not in GONE:
                    return m
            self._order = [k for k in self._members if k != self.node_id]
            self.rng.shuffle(self._order)
            self._order_idx = 0
        return None

    def _gossip_round(self, now: float) -> list[Effect]:
        recent = now - self.cfg.gossip_to_the_dead_s
        pool = [
            m
            for m in self._members.values()
            if m.node_id != self.node_id
            and (m.state not in GONE or (m.state == State.DEAD and m.since_s >= recent))
        ]
        out: list[Effect] = []
        for m in self.rng.sample(pool, min(self.cfg.gossip_nodes, len(pool))):
            parts = self._piggyback(0)
            if not parts:
                break
            out.append(Send(m.addr, parts[0] if len(parts) == 1 else Compound(tuple(parts))))
        return out

    # --- anti-entropy: push-pull and reconnect -----------------------------------------------
    def _push_pull_interval_s(self) -> float:
        return push_pull_scale(self.cfg.push_pull_interval_s, self._live_count())

    def _tick_anti_entropy(self, now: float, out: list[Effect]) -> None:
        if now >= self._next_push_pull_s:
            self._next_push_pull_s = now + self._push_pull_interval_s()
            alive = [
                m for m in self._members.values() if m.state == State.ALIVE and m.addr != self.addr
            ]
            if alive:
                out.append(self._push_pull(self.rng.choice(alive).addr))
        if now >= self._next_reconnect_s:
            self._next_reconnect_s = now + self.cfg.reconnect_interval_s
            if self._join_seeds:
                out.extend(self._rejoin(now))
            target = self._reconnect_target(now)
            if target is not None:
                out.append(self._push_pull(target.addr))

    def _alone(self) -> bool:
        return not any(
            m.state == State.ALIVE and m.addr != self.addr for m in self._members.values()
        )

    def _rejoin(self, now: float) -> list[Effect]:
        """Join the seeds not met yet (none left: joining is over)."""
        known = {m.addr for m in self._members.values()}
        unmet = [a for a in self._join_seeds if a not in known]
        if not unmet:
            self._join_seeds = []
            return []
        return self.join(now, unmet)

    def _reconnect_target(self, now: float) -> Member | None:
        """serf's reconnect: attempt with probability dead/alive, so that the cluster as a
        whole tries each DEAD member about once per interval, whatever its size."""
        live_addrs = {m.addr for m in self._members.values() if m.state not in GONE}
        dead = [
            m
            for m in self._members.values()
            if m.state == State.DEAD
            and m.addr not in live_addrs  # its address now belongs to a newer epoch
            and now - m.since_s < self.cfg.dead_reclaim_s
        ]
        if not dead or self.rng.random() > len(dead) / max(1, len(live_addrs)):
            return None
        return self.rng.choice(dead)

    def _push_pull(self, addr: str) -> Stream:
        return Stream(addr, PushPull(self.node_id, self.addr, self.table(), True))

    # --- packets -----------------------------------------------------------------------------
    def receive(self, now: float, sender_addr: str, message: Message) -> list[Effect]:
        """One UDP packet."""
        out: list[Effect] = []
        self._handle(now, sender_addr, message, out)
        return out

    def receive_stream(self, now: float, sender_addr: str, message: StreamMessage) -> list[Effect]:
        """One TCP stream message; those of other subsystems (DocVector, DocUpdate) are
        ignored. A PushPull is merged first and answered with the merged view, so the answer
        carries any refutation the merge caused (memberlist answers before merging)."""
        out: list[Effect] = []
        if isinstance(message, PushPull):
            self.merge(now, message.updates)
            if message.reply:
                table = self.table()
                out.append(Stream(message.addr, PushPull(self.node_id, self.addr, table, False)))
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
                # Full tables exceed a UDP packet past ~20 members: answer over TCP.
                out.append(Stream(addr, PushPull(self.node_id, self.addr, self.table(), False)))
            case StateSync(updates):  # kept decodable for older peers; same as a merge
                self.merge(now, updates)
            case Alive():
                self._on_alive(now, msg)
            case Suspect():
                self._on_suspect(now, msg)
            case Dead():
                self._on_dead(now, msg)
            case Leave():
                self._on_leave(now, msg)

    # --- helpers -----------------------------------------------------------------------------
    def _piggyback(self, used: int, head_parts: int = 0) -> list[Message]:
        """Queued updates that fit next to `used` bytes: the whole datagram, encryption
        included, stays within max_packet_bytes."""
        return list(
            self._queue.take(
                self._live_count(),
                _PART_OVERHEAD,
                self.cfg.max_packet_bytes - PACKET_ENVELOPE_BYTES - used,
                MAX_COMPOUND_PARTS - head_parts,
            )
        )

    def _send(self, addr: str, msg: Message) -> Send:
        """`msg` with gossip piggybacked, but only towards a member: an answer to an address we
        do not know (a replayed Ping from a spoofed source) is never larger than the request."""
        if not any(m.addr == addr for m in self._members.values()):
            return Send(addr, msg)
        # A compound never nests: piggybacked updates join the head's own parts.
        head = msg.parts if isinstance(msg, Compound) else (msg,)
        extra = self._piggyback(approx_size(msg), len(head))
        if not extra:
            return Send(addr, msg)
        return Send(addr, Compound((*head, *extra)))
