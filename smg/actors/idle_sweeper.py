"""IdleSweeperActor: ticks the idle-read sweeper (`smg.core.idle`) on the actor's clock.

The sweeper itself is shared with the request path (readers add and release watches); this actor
only owns the periodic tick, so its ticker task lives under a supervisor like every other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from smg.actors.runtime import Actor
from smg.core.idle import IdleSweeper

log = structlog.get_logger("smg.idle")


@dataclass(frozen=True, slots=True)
class Sweep:
    """Time to look at every watched upstream stream."""


class IdleSweeperActor(Actor):
    def __init__(self, sweeper: IdleSweeper) -> None:
        super().__init__()
        self.sweeper = sweeper

    async def on_start(self) -> None:
        self.every(self.sweeper.interval_s, Sweep())

    async def handle(self, message: Any) -> Any:
        match message:
            case Sweep():
                cut = self.sweeper.tick()
                if cut:
                    log.warning("upstream_idle_cut", streams=cut, idle_s=self.sweeper.idle_s)
            case _:
                raise TypeError(f"IdleSweeperActor: unexpected message {message!r}")
        return None
