"""How a gateway joins the mesh: the node's identity, its replicated documents, its actors.

`GatewayMesh` is built from the config tree. With `--enable-mesh` (or `smg node`) it runs a
`MeshNode` (membership + replication, with its `MeshUpkeep`) and a `MeshSyncActor` (worker
registry <-> directory, cache summaries -> hints), which talk to the rest of the gateway through
the event bus; with `--rate-limit-tokens-per-second` alone it still rate-limits, over a private
document.

Secure by default: a mesh bound beyond loopback refuses to start without `--cluster-key`
(`ConfigError`, one line saying what to set); `--mesh-insecure` is the only way around, and it
logs a warning every minute while the mesh runs. A keyless loopback mesh reads nothing that does
not come from loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import random
import socket
import time
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from smg.actors.event_bus import EventBus
from smg.actors.mailbox import Overflow
from smg.actors.mesh_node import AddSeeds, Leave, MeshNode, MeshView
from smg.actors.mesh_sync import MeshSyncActor
from smg.actors.mesh_transport import FaultPlan
from smg.actors.mesh_upkeep import MeshUpkeep
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.api.mesh_routes import MeshCollector, MeshRoutes
from smg.api.rate_limiting import rate_check, rate_limit_middleware
from smg.clock import Clock
from smg.config import ConfigError, GatewayConfig, MeshNodeConfig
from smg.config.mesh_node import seed_addrs
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.mesh import cache_summary, rate_limit, worker_records
from smg.mesh.cache_summary import CacheSummaries
from smg.mesh.config import MeshConfig, is_loopback
from smg.mesh.identity import NodeIdentity
from smg.mesh.keyring import MAX_KEYS, MIN_SECRET_CHARS, Keyring
from smg.mesh.rate_limit import ClusterRateLimiter
from smg.mesh.replica import Replica
from smg.mesh.worker_records import HybridClock, WorkerDirectory
from smg.pipeline.cache_state import CacheAwareState

log = structlog.get_logger("smg.mesh")

WORKERS, RATE_LIMITS, CACHE = "workers", "rate_limits", "cache"
MAX_SERVER_NAME_CHARS = 200  # the node id (name@epoch.fingerprint) must fit a wire name
SEED_RESOLVE_TIMEOUT_S = 5.0  # a --join name's DNS lookup at start


def mesh_keyring(cfg: MeshNodeConfig) -> Keyring | None:
    """The keyring of --cluster-key (primary) and --cluster-key-secondary, or None for a keyless
    mesh, which only loopback or --mesh-insecure allows. Raises ConfigError (never naming a key)
    for a mesh that cannot run safely."""
    secondary = [k for entry in cfg.cluster_key_secondary for k in entry.replace(",", " ").split()]
    if cfg.cluster_key is None:
        if secondary:
            raise ConfigError("--cluster-key-secondary needs --cluster-key (the primary key)")
        if not is_loopback(cfg.mesh_host) and not cfg.mesh_insecure:
            raise ConfigError(
                f"the mesh listens on {cfg.mesh_host or '0.0.0.0'}, beyond loopback: set "
                "--cluster-key (the same random secret of 16+ characters on every node, e.g. "
                "`openssl rand -base64 32`), or --mesh-insecure to run it unencrypted"
            )
        return None
    keys = [cfg.cluster_key, *secondary]
    if any(len(k) < MIN_SECRET_CHARS or any(c.isspace() or c == "," for c in k) for k in keys):
        raise ConfigError(
            f"every mesh key (--cluster-key, --cluster-key-secondary) needs {MIN_SECRET_CHARS}+ "
            "characters and no blanks or commas (e.g. `openssl rand -base64 32`)"
        )
    if len(set(keys)) > MAX_KEYS:
        raise ConfigError(f"at most {MAX_KEYS} mesh keys (one primary, the rest secondary)")
    return Keyring(cfg.cluster_key, secondary)


def check_server_name(cfg: MeshNodeConfig) -> None:
    name = cfg.mesh_server_name
    if name is not None and (
        not name
        or len(name) > MAX_SERVER_NAME_CHARS
        or not name.isprintable()
        or any(c.isspace() or c == "/" for c in name)
    ):
        raise ConfigError(
            f"--mesh-server-name must be 1-{MAX_SERVER_NAME_CHARS} printable characters "
            "without blanks or '/'"
        )


def node_name(cfg: MeshNodeConfig, advertise_host: str) -> str:
    return cfg.mesh_server_name or f"{advertise_host}-{cfg.mesh_port}"


def advertise_host(cfg: MeshNodeConfig) -> str:
    """The address peers send to: an IP (a name given is resolved once, at start: peers' UDP
    packets go to addresses, and every node must name this one the same way)."""
    if cfg.mesh_advertise_host:
        return _address_of(cfg.mesh_advertise_host)
    if cfg.mesh_host not in ("0.0.0.0", "::", ""):
        return cfg.mesh_host
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    log.warning("mesh_advertise_guessed", host=host, hint="set --mesh-advertise-host")
    return host


def _address_of(host: str) -> str:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise SystemExit(f"--mesh-advertise-host {host}: cannot resolve it ({exc})") from None


async def resolve_seeds(
    seeds: list[str], family: int = socket.AF_INET, timeout_s: float = SEED_RESOLVE_TIMEOUT_S
) -> list[str]:
    """`host:port` seeds with every name resolved to its addresses of `family` (the mesh
    socket's: a headless Service's name gives every pod's), IPs as they are; a name that does
    not resolve in `timeout_s` is logged and skipped (another seed, or a later restart, may do)."""
    loop = asyncio.get_running_loop()
    out: list[str] = []
    for seed in seeds:
        host, _, port = seed.rpartition(":")
        try:
            ipaddress.ip_address(host.strip("[]"))
            out.append(seed)
            continue
        except ValueError:
            pass
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, int(port), family=family, type=socket.SOCK_DGRAM), timeout_s
            )
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("mesh_seed_unresolved", seed=seed, error=f"{type(exc).__name__}: {exc}")
            continue
        for family, _, _, _, sockaddr in infos:
            ip = str(sockaddr[0])
            out.append(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    return list(dict.fromkeys(out))


def boot_epoch(wall: Callable[[], float]) -> int:
    """This boot's epoch: wall-clock milliseconds. Peers compare epochs at one address and let
    the newer id replace the older at once, so epochs must grow from one boot to the next (a
    random epoch would lose to its past life about half the time)."""
    return int(wall() * 1000)


class GatewayMesh:
    def __init__(
        self,
        cfg: GatewayConfig,
        clock: Clock,
        rng: random.Random,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.wall = wall  # rate-limit windows and HLC stamps: comparable across hosts
        self.enabled = cfg.mesh.enable_mesh
        mc = cfg.mesh
        self.keyring = mesh_keyring(mc) if self.enabled else None
        if self.enabled:
            check_server_name(mc)
        # keyless beyond loopback: only with --mesh-insecure (mesh_keyring refused otherwise)
        self.insecure = self.enabled and self.keyring is None and not is_loopback(mc.mesh_host)
        self.advertise = advertise_host(mc) if self.enabled else "local"
        # a fresh signing key pair per boot; the node id names its public key
        self.identity = NodeIdentity.generate(f"{node_name(mc, self.advertise)}@{boot_epoch(wall)}")
        self.node_id = self.identity.node_id
        self.rng = rng
        self.replicas = {
            name: Replica(name, self.identity, validate)
            for name, validate in (
                (WORKERS, worker_records.valid_value),
                (RATE_LIMITS, rate_limit.valid_value),
                (CACHE, cache_summary.valid_value),
            )
        }
        self.summaries = CacheSummaries(self.replicas[CACHE], self.node_id)
        self._cache_state: CacheAwareState | None = None
        self._resolved_seeds: list[str] = []  # --join, names resolved at start
        self._discovered_seeds: list[str] = []  # router pods (--router-selector)
        self.view: SnapshotCell[MeshView] = SnapshotCell(MeshView(self.node_id, self.advertise))
        self.hlc = HybridClock(wall, self.node_id)
        self.directory = WorkerDirectory(self.replicas[WORKERS], self.node_id, clock=self.hlc)
        rl = cfg.rate_limit
        self.limiter: ClusterRateLimiter | None = None
        if rl.rate_limit_tokens_per_second > 0:
            per_window = max(
                1, math.floor(rl.rate_limit_tokens_per_second * rl.rate_limit_window_secs)
            )
            self.limiter = ClusterRateLimiter(
                self.replicas[RATE_LIMITS], self.node_id, per_window, rl.rate_limit_window_secs
            )
        self.upkeep = MeshUpkeep(
            replicas=self.replicas,
            directory=self.directory,
            summaries=self.summaries,
            live_members=self._live_members,
            limiter=self.limiter,
            wall=wall,
            # summaries are hints: refreshed a few times per push-pull period (5 s on the LAN)
            cache_publish_interval_s=max(
                1.0, MeshConfig.profile(mc.mesh_profile).push_pull_interval_s / 6
            ),
            insecure_host=mc.mesh_host if self.insecure else None,
        )
        self.faults = FaultPlan() if mc.mesh_fault_injection else None
        self._node: MeshNode | None = None
        self._node_ref: ActorRef | None = None

    @property
    def cache_state(self) -> CacheAwareState | None:
        """The cache-aware state (set when the policy is cache-aware): read for the summaries
        this node publishes; the hints it learns go to its owner as events."""
        return self._cache_state

    @cache_state.setter
    def cache_state(self, state: CacheAwareState | None) -> None:
        self._cache_state = self.upkeep.cache_state = state
        if state is not None and self.keyring is not None:
            # summary hashes are keyed by the cluster: a prompt cannot be confirmed by guessing
            state.hints.secret = self.keyring.derive(b"smg cache summary hashes")

    def _live_members(self) -> set[str]:
        return {m.node_id for m in self.view.value.members if m.state in ("alive", "suspect")}

    # --- the request path -----------------------------------------------------------------------
    def middlewares(self) -> list[Any]:
        if self.limiter is None:
            return []
        return [rate_limit_middleware(self.limiter, self.wall, lambda: self.view.value.live_nodes)]

    def rate_check(self) -> Callable[[str], None] | None:
        """The lean edge's rate limit (the middleware's check), None without a limit."""
        if self.limiter is None:
            return None
        return rate_check(self.limiter, self.wall, lambda: self.view.value.live_nodes)

    def install(self, app: web.Application) -> None:
        if self.enabled:
            MeshRoutes(self.status, self.faults).install(app)

    def collector(self) -> MeshCollector:
        return MeshCollector(self.status)

    def status(self) -> dict[str, Any] | None:
        return self._node.status() if self._node is not None else None

    # --- lifespan -------------------------------------------------------------------------------
    async def start(
        self,
        core: Supervisor,
        registry: ActorRef,
        registry_cell: SnapshotCell[RegistrySnapshot],
        events: EventBus,
    ) -> None:
        if not self.enabled:
            return
        self.upkeep.registry = registry_cell
        summaries = self.summaries if self.cache_state is not None else None
        await core.start_child(
            ChildSpec(
                "mesh_sync",
                lambda: MeshSyncActor(
                    directory=self.directory,
                    hlc=self.hlc,
                    registry=registry,
                    registry_cell=registry_cell,
                    events=events,
                    summaries=summaries,
                ),
            )
        )
        family = socket.AF_INET6 if ":" in self.cfg.mesh.mesh_host else socket.AF_INET
        self._resolved_seeds = await resolve_seeds(seed_addrs(self.cfg.mesh), family)
        self._node_ref = await core.start_child(
            ChildSpec(
                "mesh_node",
                lambda: self._make_node(events),
                capacity=8192,
                overflow=Overflow.DROP_OLDEST,
            )
        )
        log.info("mesh_joining", node=self.node_id, seeds=self._resolved_seeds)

    def _make_node(self, events: EventBus) -> MeshNode:
        mc = self.cfg.mesh
        node = MeshNode(
            node_id=self.node_id,
            bind_host=mc.mesh_host,
            bind_port=mc.mesh_port,
            advertise_addr=f"{self.advertise}:{mc.mesh_port}",
            seeds=self._seeds(),
            swim_cfg=MeshConfig.profile(mc.mesh_profile),
            replicas=self.replicas,
            keyring=self.keyring,
            rng=random.Random(self.rng.random()),
            view=self.view,
            events=events,
            upkeep=self.upkeep,
            faults=self.faults,
            allow_remote=True if self.insecure else None,
        )
        self._node = node
        return node

    def _seeds(self) -> list[str]:
        """The configured peers, plus (after a restart of the node actor) every member it last
        saw alive, so a restart rejoins the mesh even when the configured seeds are gone."""
        seen = [
            m.addr
            for m in self.view.value.members
            if m.state in ("alive", "suspect") and m.node_id != self.node_id
        ]
        return list(dict.fromkeys([*self._resolved_seeds, *self._discovered_seeds, *seen]))

    def add_seeds(self, addrs: list[str]) -> None:
        """Peers found by discovery: joined now, and again by a restarted node."""
        self._discovered_seeds = list(dict.fromkeys([*self._discovered_seeds, *addrs]))
        if self._node_ref is not None and self._node_ref.alive:
            try:
                self._node_ref.tell(AddSeeds(tuple(addrs)))
            except Exception as exc:  # a full or closed mailbox: the restart rejoins them
                log.warning("mesh_add_seeds_failed", error=type(exc).__name__)

    async def leave(self) -> None:
        """Graceful leave at shutdown: peers mark us LEFT instead of suspecting us."""
        if self._node_ref is not None and self._node_ref.alive:
            try:
                self._node_ref.tell(Leave())
            except Exception:
                return
            await self.clock.sleep(0.3)
