"""The member table and SWIM's precedence rules (alive/suspect/dead/left, incarnations).

`Membership` is the state half of the sans-IO node: it applies updates (gossiped or merged from
a push-pull table), runs the Lifeguard suspicion timers, refutes accusations about itself,
replaces a member's past life when a newer epoch of it shows up at the same address, and
forgets DEAD/LEFT members after `dead_reclaim_s`. `SwimNode` (swim.py) adds the protocol.

Numbers are range-checked here too, not only by the codec (the core must hold for any caller):
an update whose incarnation is outside 0..MAX_INCARNATION is ignored, and a refutation never
goes past MAX_INCARNATION, so our own messages always encode. An accusation at exactly
MAX_INCARNATION cannot be out-bid; only a node holding the cluster key can send one (an honest
node never gets near it), and the node keeps running either way."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from smg.mesh.awareness import Awareness
from smg.mesh.broadcast_queue import BroadcastQueue
from smg.mesh.config import MeshConfig
from smg.mesh.messages import (
    MAX_INCARNATION,
    Alive,
    Dead,
    Leave,
    Member,
    State,
    Suspect,
    Update,
    approx_size,
)
from smg.mesh.suspicion import Suspicion, confirmations_wanted, suspicion_bounds_s

GONE = (State.DEAD, State.LEFT)
# memberlist's pushPullScaleThreshold: push-pull is not stretched below this many members.
PUSH_PULL_SCALE_THRESHOLD = 32


def epoch_of(node_id: str) -> int:
    """The per-boot epoch of a "name@epoch" or "name@epoch.fingerprint" id; -1 when the id
    carries none."""
    _, sep, tail = node_id.rpartition("@")
    epoch = tail.partition(".")[0]
    return int(epoch) if sep and epoch.isascii() and epoch.isdigit() and len(epoch) < 20 else -1


def in_range(u: Update) -> bool:
    """An update the core may act on: its incarnation is 0..MAX_INCARNATION (an int)."""
    inc = u.incarnation
    return type(inc) is int and 0 <= inc <= MAX_INCARNATION


def push_pull_scale(interval_s: float, n: int) -> float:
    """memberlist's pushPullScale: keep the cluster-wide push-pull rate bounded past 32."""
    if n <= PUSH_PULL_SCALE_THRESHOLD:
        return interval_s
    return (math.ceil(math.log2(n) - math.log2(PUSH_PULL_SCALE_THRESHOLD)) + 1) * interval_s


class Membership:
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

    # --- views -------------------------------------------------------------------------------
    def members(self) -> dict[str, Member]:
        return dict(self._members)

    def state_of(self, node_id: str) -> State | None:
        m = self._members.get(node_id)
        return m.state if m else None

    def _live_count(self) -> int:
        return sum(1 for m in self._members.values() if m.state not in GONE)

    def table(self) -> tuple[Update, ...]:
        """Our full view as updates, for a push-pull (suspicions are vouched for by us)."""
        return tuple(self._as_update(m) for m in self._members.values())

    def _on_new_member(self, now: float, node: str, revived: bool) -> None:
        """Hook: a member appeared, or came back from DEAD (`revived`)."""

    # --- merge (push-pull) -------------------------------------------------------------------
    def merge(self, now: float, updates: tuple[Update, ...]) -> None:
        """memberlist's mergeState: a remote DEAD only makes us *suspect* (we run our own
        timer, and the accused gets the chance to refute); a remote LEFT is taken as is."""
        for u in updates:
            if not in_range(u):
                continue
            match u:
                case Alive():
                    self._on_alive(now, u)
                case Leave():
                    self._on_leave(now, u)
                case Suspect(node, inc, _) | Dead(node, inc, _):
                    self._on_suspect(now, Suspect(node, inc, self.node_id))

    # --- timers ------------------------------------------------------------------------------
    def _tick_suspicions(self, now: float) -> None:
        for node, s in list(self._suspicions.items()):
            if now >= s.deadline_s:
                m = self._members[node]
                self._on_dead(now, Dead(node, m.incarnation, self.node_id))

    def _reap(self, now: float) -> None:
        """Bounded memory: forget DEAD/LEFT members after dead_reclaim_s."""
        cutoff = now - self.cfg.dead_reclaim_s
        for node, m in list(self._members.items()):
            if m.state in GONE and m.since_s < cutoff and node != self.node_id:
                self._forget(node)

    # --- SWIM precedence ---------------------------------------------------------------------
    def _on_alive(self, now: float, u: Alive) -> None:
        if not in_range(u):
            return
        if u.node == self.node_id:
            if u.incarnation > self.incarnation and not self.leaving:
                self._refute(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is not None and u.incarnation <= m.incarnation:
            return
        if (m is None or m.addr != u.addr) and not self._claim_addr(u):
            return
        if m is None or m.state in GONE:
            self._on_new_member(now, u.node, m is not None and m.state == State.DEAD)
        self._suspicions.pop(u.node, None)
        self._members[u.node] = Member(u.node, u.addr, State.ALIVE, u.incarnation, now)
        self._broadcast(u)

    def _claim_addr(self, u: Alive) -> bool:
        """A restarted node has a new "name@epoch" id at its old address: the newer epoch
        replaces the older at once (no lingering suspicion), and a stale one is ignored."""
        new_epoch = epoch_of(u.node)
        for node, m in list(self._members.items()):
            if m.addr != u.addr or node == u.node:
                continue
            old_epoch = epoch_of(node)
            if node == self.node_id or old_epoch > new_epoch:
                return False
            if old_epoch < new_epoch:
                self._forget(node)
        return True

    def _on_suspect(self, now: float, u: Suspect) -> None:
        if not in_range(u):
            return
        if u.node == self.node_id:
            self._accused(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is None or u.incarnation < m.incarnation or m.state in GONE:
            return
        s = self._suspicions.get(u.node)
        if s is not None:
            # memberlist confirms on any suspect not older than what we hold.
            if s.confirm(u.from_node):
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
        self._on_gone(now, u, State.DEAD)

    def _on_leave(self, now: float, u: Leave) -> None:
        self._on_gone(now, u, State.LEFT)

    def _on_gone(self, now: float, u: Dead | Leave, state: State) -> None:
        """DEAD and LEFT share SWIM's precedence: they override ALIVE/SUSPECT at the same or a
        newer incarnation, and a node told it is gone refutes."""
        if not in_range(u):
            return
        if u.node == self.node_id:
            self._accused(u.incarnation)
            return
        m = self._members.get(u.node)
        if m is None or u.incarnation < m.incarnation or m.state in GONE:
            return
        self._suspicions.pop(u.node, None)
        self._set(now, u.node, state, u.incarnation)
        self._broadcast(u)

    def _accused(self, incarnation: int) -> None:
        """Someone holds us SUSPECT, DEAD or LEFT (only we may announce our own leave)."""
        if self.leaving:
            return
        if incarnation >= self.incarnation:
            self._refute(incarnation)
        else:
            # A stale accusation (memberlist ignores it): its sender missed our refutation,
            # so re-announce the current incarnation instead of raising it again.
            self._broadcast(Alive(self.node_id, self.addr, self.incarnation))

    def _refute(self, heard_incarnation: int) -> None:
        """Only a node raises its own incarnation: out-bid the accusation and say so (never
        past MAX_INCARNATION: what we announce must stay within what peers accept)."""
        self.incarnation = min(max(self.incarnation, heard_incarnation) + 1, MAX_INCARNATION)
        self._set(None, self.node_id, State.ALIVE, self.incarnation)
        self._broadcast(Alive(self.node_id, self.addr, self.incarnation))
        self.awareness.apply(1)  # Lifeguard: being suspected hints we are the slow one

    # --- helpers -----------------------------------------------------------------------------
    def _forget(self, node: str) -> None:
        self._members.pop(node, None)
        self._suspicions.pop(node, None)

    def _set(self, now: float | None, node: str, state: State, inc: int) -> None:
        m = self._members[node]
        since = m.since_s if now is None else now
        self._members[node] = replace(m, state=state, incarnation=inc, since_s=since)

    def _broadcast(self, u: Update) -> None:
        self._queue.push(u.node, u, approx_size(u))

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
