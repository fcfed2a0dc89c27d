"""A seeded simulated network with a fake clock that drives SwimNodes in virtual time."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from smg.mesh.config import MeshConfig
from smg.mesh.messages import Effect, Message, Send
from smg.mesh.swim import SwimNode


@dataclass(order=True)
class _InFlight:
    at_s: float
    n: int
    src: str = field(compare=False)
    dst: str = field(compare=False)
    msg: Message = field(compare=False)


class SimNet:
    def __init__(
        self,
        seed: int,
        cfg: MeshConfig | None = None,
        loss: float = 0.0,
        delay_s: tuple[float, float] = (0.001, 0.01),
        tick_s: float = 0.05,
    ) -> None:
        self.rng = random.Random(seed)
        self.cfg = cfg or MeshConfig.lan()
        self.loss = loss
        self.node_loss: dict[str, float] = {}  # extra loss on packets to/from an addr
        self.delay_s = delay_s
        self.tick_s = tick_s
        self.now = 0.0
        self.nodes: dict[str, SwimNode] = {}
        self.down: set[str] = set()
        self.cut: set[frozenset[str]] = set()  # partitioned links
        self._heap: list[_InFlight] = []
        self._n = 0

    def add(self, name: str, seeds: tuple[str, ...] = ()) -> SwimNode:
        node = SwimNode(name, name, self.cfg, random.Random(self.rng.random()))
        self.nodes[name] = node
        self.deliver(name, node.join(self.now, list(seeds)))
        return node

    def cluster(self, n: int) -> list[SwimNode]:
        first = self.add("n0")
        return [first, *(self.add(f"n{i}", ("n0",)) for i in range(1, n))]

    def deliver(self, src: str, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Send):
                self._post(src, e.addr, e.message)

    def _post(self, src: str, dst: str, msg: Message) -> None:
        if src in self.down or dst in self.down or frozenset((src, dst)) in self.cut:
            return
        loss = 1 - (1 - self.loss) * (1 - self.node_loss.get(src, 0)) * (
            1 - self.node_loss.get(dst, 0)
        )
        if self.rng.random() < loss:
            return
        self._n += 1
        at = self.now + self.rng.uniform(*self.delay_s)
        heapq.heappush(self._heap, _InFlight(at, self._n, src, dst, msg))

    def run_until(self, t_s: float, stop: Callable[[], bool] | None = None) -> bool:
        """Advance virtual time to t_s; return True early if `stop()` becomes true."""
        while self.now < t_s:
            step_end = min(t_s, self.now + self.tick_s)
            while self._heap and self._heap[0].at_s <= step_end:
                p = heapq.heappop(self._heap)
                self.now = p.at_s
                if p.dst in self.nodes and p.dst not in self.down:
                    self.deliver(p.dst, self.nodes[p.dst].receive(self.now, p.src, p.msg))
            self.now = step_end
            for name, node in self.nodes.items():
                if name not in self.down:
                    self.deliver(name, node.tick(self.now))
            if stop is not None and stop():
                return True
        return False

    def alive_nodes(self) -> list[SwimNode]:
        return [n for k, n in self.nodes.items() if k not in self.down]
