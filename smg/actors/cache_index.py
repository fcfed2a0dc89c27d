"""CacheIndexActor: owns the cache-aware routing state and its upkeep.

The policy matches and inserts on the request path (a synchronous call into the state this actor
owns: no await sits between match and insert, so it is never seen half-updated). Upkeep that can
be slow — the periodic LRU eviction to `--max-tree-size`, forgetting a removed worker — happens
here, off the request path, in response to messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from smg.actors.runtime import Actor
from smg.config import RoutingConfig

log = structlog.get_logger("smg.cache_index")


@dataclass(frozen=True, slots=True)
class Evict:
    pass


@dataclass(frozen=True, slots=True)
class ForgetWorker:
    worker_id: str


class CacheIndexActor(Actor):
    def __init__(self, policy: Any, cfg: RoutingConfig) -> None:
        super().__init__()
        self.policy = policy
        self.cfg = cfg
        self.evicted_total = 0

    async def on_start(self) -> None:
        if hasattr(self.policy, "evict") and self.cfg.eviction_interval_secs > 0:
            self.every(self.cfg.eviction_interval_secs, Evict())

    async def handle(self, message: Any) -> Any:
        match message:
            case Evict():
                evicted = int(self.policy.evict(self.cfg.max_tree_size) or 0)
                self.evicted_total += evicted
                if evicted:
                    log.debug("cache_evicted", elements=evicted)
                return evicted
            case ForgetWorker(worker_id=wid):
                self.policy.on_worker_removed(wid)
                return None
            case _:
                raise TypeError(f"CacheIndexActor: unexpected message {message!r}")
