"""Routing policies: pick one routable worker for a request. See `base.py` for the interface."""

from __future__ import annotations

import random
from collections.abc import Callable

from smg.config import RoutingConfig
from smg.pipeline.loads import BoardCell, WaitParams
from smg.pipeline.policies.base import Candidate, Policy, RouteRequest, least_loaded
from smg.pipeline.policies.bucket import BucketPolicy
from smg.pipeline.policies.cache_aware import CacheAwarePolicy, CacheAwareState, Recorder
from smg.pipeline.policies.consistent_hashing import ConsistentHashingPolicy, HashRing
from smg.pipeline.policies.least_load import LeastLoadPolicy
from smg.pipeline.policies.manual import ManualPolicy
from smg.pipeline.policies.power_of_two import PowerOfTwoPolicy
from smg.pipeline.policies.prefix_hash import PrefixHashPolicy
from smg.pipeline.policies.random_policy import RandomPolicy
from smg.pipeline.policies.round_robin import RoundRobinPolicy

__all__ = [
    "BucketPolicy",
    "CacheAwarePolicy",
    "CacheAwareState",
    "Candidate",
    "ConsistentHashingPolicy",
    "HashRing",
    "LeastLoadPolicy",
    "ManualPolicy",
    "Policy",
    "PowerOfTwoPolicy",
    "PrefixHashPolicy",
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
    recorder: Recorder | None = None,
    loads: BoardCell | None = None,
    hash_misses: bool = False,
) -> Policy:
    """The policy called `name` (one of `smg.config.POLICIES`), set up from `cfg`.

    `cache_state` and `recorder` let the caller own cache-aware's trees: the policy reads
    `cache_state` and records its decisions into `recorder` (the cache-index actor's lane).
    `loads` is the load monitor's `SnapshotCell[LoadBoard]`, read by least_load and
    power_of_two (without it they compare requests in flight). `hash_misses`: other routers
    share these workers (a mesh, `--workers N`): cache-aware places a prefix it holds nothing of
    by rendezvous hashing, as they all do (see `cache_aware.py`).
    """
    wait = WaitParams(
        kv_pressure_weight=cfg.least_load_kv_pressure_weight,
        default_throughput=cfg.least_load_default_throughput,
        mean_prefill_tokens=cfg.least_load_mean_prefill_tokens,
    )
    match name:
        case "round_robin":
            return RoundRobinPolicy()
        case "random":
            return RandomPolicy(rng)
        case "power_of_two":
            return PowerOfTwoPolicy(rng, loads=loads, now=now, params=wait)
        case "cache_aware":
            return CacheAwarePolicy(
                cache_threshold=cfg.cache_threshold,
                balance_abs_threshold=cfg.balance_abs_threshold,
                balance_rel_threshold=cfg.balance_rel_threshold,
                now=now,
                state=cache_state,
                recorder=recorder,
                max_tree_bytes=cfg.max_tree_bytes,
                max_tree_size=cfg.max_tree_size,
                hash_misses=hash_misses,
            )
        case "consistent_hashing":
            return ConsistentHashingPolicy(rng)
        case "manual":
            return ManualPolicy(rng)
        case "least_load":
            return LeastLoadPolicy(
                loads, now, params=wait, max_waiting_requests=cfg.least_load_max_waiting_requests
            )
        case "prefix_hash":
            return PrefixHashPolicy(
                prefix_token_count=cfg.prefix_token_count,
                load_factor=cfg.prefix_hash_load_factor,
                balance_abs_threshold=cfg.prefix_hash_balance_abs_threshold,
            )
        case "bucket":
            return BucketPolicy(
                now,
                adjust_interval_s=cfg.bucket_adjust_interval_secs,
                balance_abs_threshold=cfg.balance_abs_threshold,
                balance_rel_threshold=cfg.balance_rel_threshold,
            )
    raise ValueError(f"unknown routing policy {name!r}")
