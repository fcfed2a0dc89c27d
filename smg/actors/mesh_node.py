"""MeshNode: the actor that owns this gateway's place in the mesh.

It owns the sans-IO SWIM core, the replicated documents (one pycrdt doc per namespace) and the
sockets. Time enters as `Tick`s, packets as `Packet`/`StreamIn` messages; the core's effects go
out through the transport. Replicated state moves three ways (`smg/mesh/replication.py`):

- deltas: local writes are collected every tick and pushed to every live member (TCP);
- on contact: when a member becomes alive in our view (join, refute, healed partition) both
  sides exchange state vectors and send each other what the other misses;
- anti-entropy: every `doc_sync_interval_s` a random live member gets our state vectors.

The hot path never waits on this actor: it reads `view` (an immutable `MeshView` snapshot) and
the replicas' decoded items, which only this actor's handlers mutate, on the same event loop.

A peer's update that changed documents is published on the event bus as `MeshDocumentsChanged`
(the mesh-sync actor imports what changed). Each tick also runs the node's `MeshUpkeep` (rate
limits, cache summaries, compaction: its own writes to its own documents).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from smg.actors.event_bus import EventBus
from smg.actors.mesh_transport import FaultPlan, MeshTransport
from smg.actors.mesh_upkeep import MeshUpkeep
from smg.actors.messages import MeshDocumentsChanged
from smg.actors.runtime import Actor
from smg.core.snapshots import SnapshotCell
from smg.mesh.config import MeshConfig
from smg.mesh.keyring import Keyring
from smg.mesh.messages import (
    Effect,
    Message,
    PushPull,
    Send,
    State,
    Stream,
    StreamMessage,
)
from smg.mesh.replica import Replica
from smg.mesh.replication import Replication
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
class AddSeeds:
    """More peers to join (discovery's router pods), beside the configured seeds."""

    addrs: tuple[str, ...]


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
        keyring: Keyring | None,
        rng: random.Random,
        view: SnapshotCell[MeshView],
        tick_s: float = 0.05,
        doc_sync_interval_s: float = 5.0,
        events: EventBus | None = None,
        upkeep: MeshUpkeep | None = None,
        faults: FaultPlan | None = None,
        allow_remote: bool | None = None,
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
        self.events = events
        self.upkeep = upkeep
        self.transport = MeshTransport(
            host=bind_host,
            port=bind_port,
            advertise_addr=advertise_addr,
            node_id=node_id,
            keyring=keyring,
            on_packet=self._packet_in,
            on_stream=self._stream_in,
            rng=rng,
            faults=faults,
            allow_remote=allow_remote,
        )
        self.replication = Replication(replicas, rng, doc_sync_interval_s)

    # --- lifecycle ------------------------------------------------------------------------------
    async def on_start(self) -> None:
        await self.transport.start(self.spawn)
        now = self.clock.now()
        self._apply(self.swim.join(now, [s for s in self.seeds if s != self.advertise_addr]))
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
                if self.upkeep is not None:
                    self.upkeep.tick(now)  # e.g. rate-limit counters into their document
                self._apply(self.replication.tick(now, self._live_addrs()))
            case Packet(src, msg):
                self._apply(self.swim.receive(now, src, msg))
            case StreamIn(src, PushPull() as msg):
                self._apply(self.swim.receive_stream(now, src, msg))
            case StreamIn(src, msg):
                effects, changed = self.replication.receive(src, msg)
                self._apply(effects)
                if changed and self.events is not None:
                    self.events.publish(MeshDocumentsChanged(frozenset(changed)))
            case Leave():
                self._apply(self.swim.leave(now))
            case AddSeeds(addrs):
                self._apply(self.swim.add_seeds(now, list(addrs)))
            case _:
                raise TypeError(f"MeshNode: unexpected message {message!r}")
        self._publish_view()
        return None

    def _apply(self, effects: Sequence[Effect]) -> None:
        for e in effects:
            if isinstance(e, Send):
                self.transport.send(e.addr, e.message)
            elif isinstance(e, Stream):
                self.transport.stream(e.addr, e.message)

    def _live_addrs(self) -> frozenset[str]:
        return frozenset(
            m.addr
            for m in self.swim.members().values()
            if m.state in _LIVE and m.node_id != self.node_id
        )

    def _publish_view(self) -> None:
        members = tuple(
            MemberView(m.node_id, m.addr, m.state.value, m.incarnation)
            for m in sorted(self.swim.members().values(), key=lambda m: m.node_id)
        )
        if self.view_cell.value.members != members:
            # contact repair at once for members that just became live (join, refute, heal)
            self._apply(self.replication.set_live(self._live_addrs()))
            self.view_cell.publish(MeshView(self.node_id, self.advertise_addr, members))

    # --- status ---------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        stats = self.transport.stats
        rejected: dict[str, dict[str, int]] = {}
        for (namespace, reason), n in self.replication.rejected.items():
            rejected.setdefault(namespace, {})[reason] = n
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
            "rejected_updates": sum(self.replication.rejected.values()),
            "rejected_writes": rejected,
        }
