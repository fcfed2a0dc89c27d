"""Kubernetes worker discovery in the gateway: the rules from the launch flags, and the
discovery actor started under the core supervisor once the registry runs."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable

import aiohttp
import structlog

from smg.actors.discovery import DiscoveryActor, DiscoveryMetrics
from smg.actors.pod_watch import PodSource
from smg.actors.protocol_probe import ProtocolProbe
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.app.outbound import startup_workers
from smg.config import GatewayConfig, replace_path
from smg.config.discovery import (
    check_discovery,
    check_interval_s,
    discovery_enabled,
    parse_model_id_from,
    parse_selector,
)
from smg.core.pods import Rules, list_selector
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.pipeline.backends.address_guard import AddressGuard

log = structlog.get_logger("smg.discovery")


def with_discovery(cfg: GatewayConfig) -> GatewayConfig:
    """Checks the discovery flags; with discovery on, IGW mode on (as the Rust gateway does)."""
    check_discovery(cfg.discovery, pd=cfg.pd.pd_disaggregation)
    if discovery_enabled(cfg.discovery) and not cfg.routing.enable_igw:
        log.info("igw_enabled", reason="service discovery is on")
        return replace_path(cfg, "routing", enable_igw=True)
    return cfg


def discovery_rules(cfg: GatewayConfig) -> Rules:
    """Discovered workers speak what the command-line workers speak when they name a scheme
    (the first of them: the Rust gateway's connection mode); with none, each pod's port is
    probed, HTTP first, then gRPC (the Rust gateway's detection for a bare host:port)."""
    scheme = ""
    for msg in startup_workers(cfg):
        head = msg.url.split("://", 1)[0] if "://" in msg.url else "http"
        scheme = head
        break
    d = cfg.discovery
    return Rules(
        selector=parse_selector(d.selector, "--selector"),
        port=d.service_discovery_port,
        scheme=scheme,
        pd=cfg.pd.pd_disaggregation,
        prefill_selector=parse_selector(d.prefill_selector, "--prefill-selector"),
        decode_selector=parse_selector(d.decode_selector, "--decode-selector"),
        model_id_from=parse_model_id_from(d.model_id_from),
        router_selector=parse_selector(d.router_selector, "--router-selector"),
        mesh_port=cfg.mesh.mesh_port,
    )


async def start_discovery(
    cfg: GatewayConfig,
    core: Supervisor,
    registry: ActorRef,
    registry_cell: SnapshotCell[RegistrySnapshot],
    metrics: DiscoveryMetrics,
    rng: random.Random,
    guard: AddressGuard,
    session: aiohttp.ClientSession,
    join: Callable[[list[str]], None] | None = None,
) -> ActorRef | None:
    """Start the discovery actor (nothing without discovery on). `join` adds mesh seeds: given
    when the mesh runs, it makes --router-selector's pods this node's seeds."""
    if not discovery_enabled(cfg.discovery):
        return None
    rules = discovery_rules(cfg)
    namespace = cfg.discovery.service_discovery_namespace
    selector = list_selector(rules)
    boot_id = uuid.uuid4().hex[:12]  # this process's discovery: survives the actor's restarts

    from smg.actors.kube_pods import KubePods  # its client library: imported with discovery on

    async def connect() -> PodSource:
        return await KubePods.connect(namespace, selector)

    router_selector = ",".join(f"{k}={v}" for k, v in sorted(rules.router_selector.items()))

    async def connect_routers() -> PodSource:
        return await KubePods.connect(namespace, router_selector)

    routers = bool(rules.router_selector) and join is not None
    if rules.router_selector and join is None:
        log.warning("discovery_router_selector_unused", reason="the mesh is not enabled")

    log.info(
        "discovery_starting",
        namespace=namespace or "(all)",
        selector=selector,
        port=rules.port,
        pd=rules.pd,
        rules=dataclasses.asdict(rules),
    )
    return await core.start_child(
        ChildSpec(
            "discovery",
            lambda: DiscoveryActor(
                rules=rules,
                connect=connect,
                registry=registry,
                registry_cell=registry_cell,
                metrics=metrics,
                interval_s=float(check_interval_s(cfg.discovery)),
                rng=rng,
                boot_id=boot_id,
                check_url=guard.policy.check,  # pod IPs are literal: no resolving
                connect_routers=connect_routers if routers else None,
                join=join if routers else None,
                detect=ProtocolProbe(
                    session, cfg.health.health_check_endpoint, cfg.health.health_check_timeout_secs
                ),
            ),
            capacity=16,
        )
    )
