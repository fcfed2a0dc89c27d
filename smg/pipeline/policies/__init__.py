"""Routing policies: pick one routable worker for a request. See `base.py` for the interface."""

from __future__ import annotations

import random
from collections.abc import Callable

from smg.config import RoutingConfig
from smg.pipeline.policies.base import Candidate, Policy, RouteRequest, least_loaded
from smg.pipeline.policies.cache_aware import CacheAwarePolicy, CacheAwareState
from smg.pipeline.policies.consistent_hashing import ConsistentHashingPolicy, HashRing
from smg.pipeline.policies.manual import ManualPolicy
from smg.pipeline.policies.power_of_two import PowerOfTwoPolicy
from smg.pipeline.policies.random_policy import RandomPolicy
from smg.pipeline.policies.round_robin import RoundRobinPolicy

__all__ = [
    "CacheAwarePolicy",
    "CacheAwareState",
    "Candidate",
    "ConsistentHashingPolicy",
    "HashRing",
    "ManualPolicy",
    "Policy",
    "PowerOfTwoPolicy",
    "RandomPolicy",
    "RoundRobinPolicy",
    "RouteRequest",
    "least_loaded",
    "make_policy",
]


def make_policy(
    name: str,
    cfg: RoutingConfig,
    rng: random.Random,
    now: Callable[[], float],
    *,
    cache_state: CacheAwareState | None = None,
) -> Policy:
    """The policy called `name` (one of `smg.config.POLICIES`), set up from `cfg`.

    `cache_state` lets the caller own cache-aware's trees (e.g. a cache-index actor).
    """
    match name:
        case "round_robin":
            return RoundRobinPolicy()
        case "random":
            return RandomPolicy(rng)
        case "power_of_two":
            return PowerOfTwoPolicy(rng)
        case "cache_aware":
            return CacheAwarePolicy(
                cache_threshold=cfg.cache_threshold,
                balance_abs_threshold=cfg.balance_abs_threshold,
                balance_rel_threshold=cfg.balance_rel_threshold,
                now=now,
                state=cache_state,
            )
        case "consistent_hashing":
            return ConsistentHashingPolicy(rng)
        case "manual":
            return ManualPolicy(rng)
    raise ValueError(f"unknown routing policy {name!r}")
