"""MeshNode: the actor that owns this gateway's place in the mesh.

It owns the sans-IO SWIM core, the replicated documents (one pycrdt doc per namespace) and the
sockets. Time enters as `Tick`s, packets as `Packet`/`StreamIn` messages; the core's effects go
out through the transport. Replicated state moves three ways:

- deltas: local writes are collected every tick and pushed to every live member (TCP);
- on contact: when a member becomes alive in our view (join, refute, healed partition) both
  sides exchange state vectors and send each other what the other misses;
- anti-entropy: every `doc_sync_interval_s` a random live member gets our state vectors.

The hot path never waits on this actor: it reads `view` (an immutable `MeshView` snapshot) and
the replicas' decoded items, which only this actor's handlers mutate, on the same event loop.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from smg.actors.mesh_transport import FaultPlan, MeshTransport
from smg.actors.runtime import Actor
from smg.actors.snapshots import SnapshotCell
from smg.mesh.config import MeshConfig
from smg.mesh.messages import (
    DocUpdate,
    DocVector,
    Effect,
    Message,
    PushPull,
    Send,
    State,
    Stream,
    StreamMessage,
)
from smg.mesh.replica import Replica, ReplicaError
from smg.mesh.swim import SwimNode

log = structlog.get_logger("smg.mesh")

_LIVE = (State.ALIVE, State.SUSPECT)


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class Packet:
    src: str
    message: Message


@dataclass(frozen=True, slots=True)
class StreamIn:
    src: str
    message: StreamMessage


@dataclass(frozen=True, slots=True)
class Leave:
    """Graceful leave: tell the others, so they mark us LEFT rather than suspecting us."""


@dataclass(frozen=True, slots=True)
class MemberView:
    node_id: str
    addr: str
    state: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class MeshView:
    """What the rest of the gateway reads about the mesh (published on every change)."""

    node_id: str = ""
    addr: str = ""
    members: tuple[MemberView, ...] = ()

    @property
    def live_nodes(self) -> int:
        return max(1, sum(1 for m in self.members if m.state in ("alive", "suspect")))

    def live_addrs(self) -> list[str]:
        return [m.addr for m in self.members if m.state in ("alive", "suspect")]


class MeshNode(Actor):
    def __init__(
        self,
        *,
        node_id: str,
        bind_host: str,
        bind_port: int,
        advertise_addr: str,
        seeds: list[str],
        swim_cfg: MeshConfig,
        replicas: dict[str, Replica],
        key: bytes | None,
        rng: random.Random,
        view: SnapshotCell[MeshView],
        tick_s: float = 0.05,
        doc_sync_interval_s: float = 5.0,
        on_doc_change: Callable[[str], None] | None = None,
        before_tick: Callable[[float], None] | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        super().__init__()
        self.node_id = node_id
        self.advertise_addr = advertise_addr
        self.seeds = seeds
        self.swim = SwimNode(node_id, advertise_addr, swim_cfg, rng)
        self.replicas = replicas
        self.rng = rng
        self.view_cell = view
        self.tick_s = tick_s
        self.doc_sync_interval_s = doc_sync_interval_s
        self.on_doc_change = on_doc_change
        self.before_tick = before_tick
        self.transport = MeshTransport(
            host=bind_host,
            port=bind_port,
            advertise_addr=advertise_addr,
            node_id=node_id,
            key=key,
            on_packet=self._packet_in,
            on_stream=self._stream_in,
            rng=rng,
            faults=faults,
        )
        self._live: set[str] = set()  # addrs of live members in the last published view
        self._next_doc_sync_s = 0.0
        self.rejected_updates = 0

    # --- lifecycle ------------------------------------------------------------------------------
    async def on_start(self) -> None:
        await self.transport.start(self.spawn)
        now = self.clock.now()
        self._apply(self.swim.join(now, [s for s in self.seeds if s != self.advertise_addr]))
        self._next_doc_sync_s = now + self.doc_sync_interval_s
        self._publish_view()
        self.every(self.tick_s, Tick())
        log.info("mesh_started", node=self.node_id, addr=self.advertise_addr, seeds=self.seeds)

    async def on_stop(self) -> None:
        await self.transport.close()

    def _packet_in(self, src: str, message: Message) -> None:
        self._tell_quietly(Packet(src, message))

    def _stream_in(self, src: str, message: StreamMessage) -> None:
        self._tell_quietly(StreamIn(src, message))

    def _tell_quietly(self, message: Any) -> None:
        try:
            self.ref.tell(message)
        except Exception:  # mailbox full or closed: gossip is lossy by design
            self.transport.stats.dropped["mailbox"] += 1

    # --- messages -------------------------------------------------------------------------------
    async def handle(self, message: Any) -> Any:
        now = self.clock.now()
        match message:
            case Tick():
                self._apply(self.swim.tick(now))
                if self.before_tick is not None:
                    self.before_tick(now)  # e.g. rate-limit counters into their document
                self._push_deltas()
                if now >= self._next_doc_sync_s:
                    self._next_doc_sync_s = now + self.doc_sync_interval_s
                    self._anti_entropy()
            case Packet(src, msg):
                self._apply(self.swim.receive(now, src, msg))
            case StreamIn(src, msg):
                self._on_stream(now, src, msg)
            case Leave():
                self._apply(self.swim.leave(now))
            case _:
                raise TypeError(f"MeshNode: unexpected message {message!r}")
        self._publish_view()
        return None

    def _on_stream(self, now: float, src: str, msg: StreamMessage) -> None:
        match msg:
            case PushPull():
                self._apply(self.swim.receive_stream(now, src, msg))
            case DocVector(namespace, vector, reply):
                replica = self.replicas.get(namespace)
                if replica is None:
                    return
                try:
                    missing = replica.diff(vector)
                except ReplicaError:
                    self.rejected_updates += 1
                    return
                self.transport.stream(src, DocUpdate(namespace, missing))
                if reply:
                    self.transport.stream(src, DocVector(namespace, replica.state_vector(), False))
            case DocUpdate(namespace, update):
                replica = self.replicas.get(namespace)
                if replica is None:
                    return
                try:
                    changed = replica.apply(update)
                except ReplicaError:
                    self.rejected_updates += 1
                    return
                if changed and self.on_doc_change is not None:
                    self.on_doc_change(namespace)

    # --- effects and replication ----------------------------------------------------------------
    def _apply(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Send):
                self.transport.send(e.addr, e.message)
            elif isinstance(e, Stream):
                self.transport.stream(e.addr, e.message)

    def _push_deltas(self) -> None:
        for name, replica in self.replicas.items():
            delta = replica.take_delta()
            if delta is None:
                continue
            for addr in self._live:
                self.transport.stream(addr, DocUpdate(name, delta))

    def _anti_entropy(self) -> None:
        if not self._live:
            return
        addr = self.rng.choice(sorted(self._live))
        self._send_vectors(addr)

    def _send_vectors(self, addr: str) -> None:
        for name, replica in self.replicas.items():
            self.transport.stream(addr, DocVector(name, replica.state_vector(), True))

    def local_change(self, namespace: str) -> None:
        """A local write happened (the gateway wrote into a replica)."""
        if self.on_doc_change is not None:
            self.on_doc_change(namespace)

    def _publish_view(self) -> None:
        members = tuple(
            MemberView(m.node_id, m.addr, m.state.value, m.incarnation)
            for m in sorted(self.swim.members().values(), key=lambda m: m.node_id)
        )
        live = {
            m.addr for m in members if m.state in ("alive", "suspect") and m.node_id != self.node_id
        }
        for addr in live - self._live:
            self._send_vectors(addr)  # contact (join, refute, heal): repair both ways at once
        self._live = live
        current = self.view_cell.value
        if current.members != members:
            self.view_cell.publish(MeshView(self.node_id, self.advertise_addr, members))

    # --- status ---------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        stats = self.transport.stats
        return {
            "node_id": self.node_id,
            "addr": self.advertise_addr,
            "incarnation": self.swim.incarnation,
            "members": [
                {
                    "node_id": m.node_id,
                    "addr": m.addr,
                    "state": m.state,
                    "incarnation": m.incarnation,
                }
                for m in self.view_cell.value.members
            ],
            "namespaces": {
                name: {"digest": r.digest(), **r.stats()} for name, r in self.replicas.items()
            },
            "bytes_in": dict(stats.bytes_in),
            "bytes_out": dict(stats.bytes_out),
            "dropped": dict(stats.dropped),
            "rejected_updates": self.rejected_updates,
        }
