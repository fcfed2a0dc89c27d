"""A seeded simulated network with a fake clock that drives SwimNodes in virtual time.

Event-driven: a node is ticked at its own `next_deadline_s()`, packets arrive after a random
delay. UDP (`Send`) is lossy, may be duplicated and reordered; TCP (`Stream`) is reliable and
in order while the link is up and dropped when it is cut or an end is down. Nodes are keyed by
address; a node's id is its address, or "addr@epoch" once restarted. Every message goes through
the real wire codec (encoded with a cluster key, decoded on the way), so byte counts are exact
and a message the codec refuses fails the test. Fault injection: see
`Links` (loss, delay, partitions, asymmetric cuts, flapping) and pause/resume/crash/restart."""

from __future__ import annotations

import heapq
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from smg.mesh.codec import decode_frame_body, decode_packet, encode_frame, encode_packet
from smg.mesh.config import MeshConfig
from smg.mesh.keyring import Keyring
from smg.mesh.messages import Effect, Message, PushPull, Send, StreamMessage
from smg.mesh.swim import SwimNode

from .simlinks import Links

_WAKE, _UDP, _TCP = 0, 1, 2
_KEY = Keyring("simulated-cluster-key")


@dataclass(order=True, slots=True)
class _Event:
    at_s: float
    n: int
    kind: int = field(compare=False)
    src: str = field(compare=False)
    dst: str = field(compare=False)
    msg: Message | StreamMessage | None = field(compare=False, default=None)


class SimNet:
    def __init__(
        self,
        seed: int,
        cfg: MeshConfig | None = None,
        loss: float = 0.0,
        delay_s: tuple[float, float] = (0.001, 0.01),
        dup: float = 0.0,
        check_s: float = 0.05,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = cfg or MeshConfig.lan()
        self.links = Links(random.Random(self.rng.random()), loss, delay_s, dup)
        self.check_s = check_s  # how often run_until evaluates its stop condition
        self.now = 0.0
        self.nodes: dict[str, SwimNode] = {}  # by address
        self.down: set[str] = set()  # crashed / killed: sends and receives nothing
        self.paused: dict[str, list[_Event] | None] = {}  # held packets, or None: dropped
        self.bytes_out: dict[str, dict[str, int]] = defaultdict(lambda: {"udp": 0, "tcp": 0})
        self._heap: list[_Event] = []
        self._wake_at: dict[str, float] = {}
        self._tcp_last: dict[tuple[str, str], float] = {}
        self._n = 0

    # kept for the first tests: loss on packets to/from an address, symmetric cuts
    @property
    def node_loss(self) -> dict[str, float]:
        return self.links.node_loss

    @property
    def cut(self) -> set[frozenset[str]]:
        return self.links.cut

    # --- membership of the simulation --------------------------------------------------------
    def node_id(self, addr: str, epoch: int | None) -> str:
        """The id of a new process at `addr` (StateNet's carry a key fingerprint too)."""
        return addr if epoch is None else f"{addr}@{epoch}"

    def add(self, addr: str, seeds: tuple[str, ...] = (), epoch: int | None = None) -> SwimNode:
        node_id = self.node_id(addr, epoch)
        node = SwimNode(node_id, addr, self.cfg, random.Random(self.rng.random()))
        self.nodes[addr] = node
        self.down.discard(addr)
        self._tcp_last = {k: v for k, v in self._tcp_last.items() if addr not in k}
        self._started(addr, node)
        self.deliver(addr, node.join(self.now, list(seeds)))
        self._schedule(addr)
        return node

    def cluster(self, n: int) -> list[SwimNode]:
        first = self.add("n0")
        return [first, *(self.add(f"n{i}", ("n0",)) for i in range(1, n))]

    def kill(self, addr: str) -> None:
        """Crash: the process and its state are gone; its address answers nothing."""
        self.down.add(addr)

    def restart(self, addr: str, epoch: int, seeds: tuple[str, ...]) -> SwimNode:
        """A new process (fresh state, new "addr@epoch" id) at the same address."""
        self.paused.pop(addr, None)
        return self.add(addr, seeds, epoch)

    def pause(self, addr: str, queue: bool = True) -> None:
        """SIGSTOP: no ticks, no delivery; arriving packets wait in the socket buffer (queue)
        or are lost."""
        self.paused[addr] = [] if queue else None

    def resume(self, addr: str) -> None:
        held = self.paused.pop(addr, None) or []
        for e in held:
            self._arrive(e)
        self._schedule(addr)

    def alive_nodes(self) -> list[SwimNode]:
        return [n for k, n in self.nodes.items() if k not in self.down and k not in self.paused]

    # --- effects -----------------------------------------------------------------------------
    def deliver(self, src: str, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Send):
                packet = encode_packet(e.message, _KEY)
                # the budget holds for whole encrypted datagrams, not only payloads
                assert len(packet) <= self.cfg.max_packet_bytes, (len(packet), e.message)
                self.bytes_out[src]["udp"] += len(packet)
                self._post_udp(src, e.addr, decode_packet(packet, _KEY))
            else:
                frame = encode_frame(e.message, _KEY)
                self.bytes_out[src]["tcp"] += len(frame)
                self._post_tcp(src, e.addr, decode_frame_body(frame[4:], _KEY))

    def _usable(self, src: str, dst: str) -> bool:
        return src not in self.down and dst not in self.down and self.links.up(src, dst, self.now)

    def _post_udp(self, src: str, dst: str, msg: Message) -> None:
        if not self._usable(src, dst) or self.links.lost(src, dst):
            return
        for _ in range(self.links.copies()):
            self._push(self.now + self.links.delay(src, dst), _UDP, src, dst, msg)

    def _post_tcp(self, src: str, dst: str, msg: StreamMessage) -> None:
        if not self._usable(src, dst):
            return  # connection refused / timed out: the message is lost
        at = max(self.now + self.links.delay(src, dst), self._tcp_last.get((src, dst), 0.0))
        self._tcp_last[(src, dst)] = at
        self._push(at, _TCP, src, dst, msg)

    def _push(self, at: float, kind: int, src: str, dst: str, msg: object = None) -> None:
        self._n += 1
        heapq.heappush(self._heap, _Event(at, self._n, kind, src, dst, msg))  # type: ignore[arg-type]

    def _schedule(self, addr: str) -> None:
        node = self.nodes.get(addr)
        if node is None or addr in self.down or addr in self.paused:
            return
        at = max(self.now, self._next_wake_s(addr, node))
        pending = self._wake_at.get(addr)
        if pending is None or at < pending:
            self._wake_at[addr] = at
            self._push(at, _WAKE, addr, addr)

    # --- the loop ----------------------------------------------------------------------------
    def _arrive(self, e: _Event) -> None:
        node = self.nodes.get(e.dst)
        if node is None or e.dst in self.down:
            return
        if e.kind == _TCP and not self.links.up(e.src, e.dst, self.now):
            return  # the connection broke while in flight
        if e.dst in self.paused:
            held = self.paused[e.dst]
            if held is not None:
                held.append(e)
            return
        if e.kind == _UDP:
            assert e.msg is not None and not isinstance(e.msg, PushPull)
            effects = self._on_packet(e.dst, node, e.src, e.msg)  # type: ignore[arg-type]
        else:
            effects = self._on_stream(e.dst, node, e.src, e.msg)  # type: ignore[arg-type]
        self.deliver(e.dst, effects)
        self._schedule(e.dst)

    def _wake(self, e: _Event) -> None:
        if self._wake_at.get(e.dst) != e.at_s:
            return  # superseded by an earlier wake-up
        del self._wake_at[e.dst]
        node = self.nodes.get(e.dst)
        if node is None or e.dst in self.down or e.dst in self.paused:
            return
        self.deliver(e.dst, self._on_tick(e.dst, node))
        self._schedule(e.dst)

    # --- what a node does with time and input (a subclass adds layers over SWIM) -----------------
    def _started(self, addr: str, node: SwimNode) -> None:
        """A new process at `addr` (first start or restart), before it joins."""

    def _next_wake_s(self, addr: str, node: SwimNode) -> float:
        return node.next_deadline_s()

    def _on_tick(self, addr: str, node: SwimNode) -> list[Effect]:
        return node.tick(self.now)

    def _on_packet(self, addr: str, node: SwimNode, src: str, msg: Message) -> list[Effect]:
        return node.receive(self.now, src, msg)

    def _on_stream(self, addr: str, node: SwimNode, src: str, msg: StreamMessage) -> list[Effect]:
        return node.receive_stream(self.now, src, msg)

    def run_until(self, t_s: float, stop: Callable[[], bool] | None = None) -> bool:
        """Advance virtual time to t_s; return True early if `stop()` becomes true (checked
        every `check_s` of virtual time)."""
        next_check = self.now + self.check_s
        while True:
            at = self._heap[0].at_s if self._heap else float("inf")
            horizon = min(t_s, next_check) if stop is not None else t_s
            if at > horizon:
                self.now = horizon
                if stop is not None and stop():
                    return True
                if self.now >= t_s:
                    return False
                next_check = self.now + self.check_s
                continue
            e = heapq.heappop(self._heap)
            self.now = e.at_s
            if e.kind == _WAKE:
                self._wake(e)
            else:
                self._arrive(e)
