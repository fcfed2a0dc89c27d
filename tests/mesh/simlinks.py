"""The link model of the simulated network: loss, delay, duplication, cuts, flapping links."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

Link = tuple[str, str]  # (src, dst): links are directional


@dataclass(slots=True)
class _Flap:
    a: str
    b: str
    period_s: float
    down_s: float
    start_s: float

    def is_down(self, now: float) -> bool:
        return (now - self.start_s) % self.period_s < self.down_s


@dataclass(slots=True)
class Links:
    """What happens to a packet from src to dst at `now` (all randomness from `rng`)."""

    rng: random.Random
    loss: float = 0.0  # every UDP packet
    delay_s: tuple[float, float] = (0.001, 0.01)  # uniform: a wide range reorders packets
    dup: float = 0.0  # probability a UDP packet arrives twice
    node_loss: dict[str, float] = field(default_factory=dict)  # on packets to/from an addr
    link_loss: dict[Link, float] = field(default_factory=dict)
    link_delay_s: dict[Link, tuple[float, float]] = field(default_factory=dict)
    cut: set[frozenset[str]] = field(default_factory=set)  # both directions
    cut_dir: set[Link] = field(default_factory=set)  # one direction only (asymmetric)
    flaps: list[_Flap] = field(default_factory=list)

    # --- shaping -----------------------------------------------------------------------------
    def partition(self, *groups: set[str] | list[str] | tuple[str, ...]) -> None:
        """Cut every link between members of different groups (any number, any sizes)."""
        sets = [set(g) for g in groups]
        for i, ga in enumerate(sets):
            for gb in sets[i + 1 :]:
                self.cut.update(frozenset((a, b)) for a in ga for b in gb)

    def cut_one_way(self, src: str, dst: str) -> None:
        self.cut_dir.add((src, dst))

    def flap(self, a: str, b: str, period_s: float, down_s: float, start_s: float) -> None:
        """The a<->b link is down for the first `down_s` of every `period_s` from start_s."""
        self.flaps.append(_Flap(a, b, period_s, down_s, start_s))

    def heal(self) -> None:
        self.cut.clear()
        self.cut_dir.clear()
        self.flaps.clear()

    # --- per packet --------------------------------------------------------------------------
    def up(self, src: str, dst: str, now: float) -> bool:
        if (src, dst) in self.cut_dir or frozenset((src, dst)) in self.cut:
            return False
        return not any(f.is_down(now) for f in self.flaps if (f.a, f.b) in ((src, dst), (dst, src)))

    def lost(self, src: str, dst: str) -> bool:
        keep = (
            (1 - self.loss)
            * (1 - self.node_loss.get(src, 0.0))
            * (1 - self.node_loss.get(dst, 0.0))
            * (1 - self.link_loss.get((src, dst), 0.0))
        )
        return self.rng.random() >= keep

    def delay(self, src: str, dst: str) -> float:
        return self.rng.uniform(*self.link_delay_s.get((src, dst), self.delay_s))

    def copies(self) -> int:
        return 2 if self.dup and self.rng.random() < self.dup else 1
