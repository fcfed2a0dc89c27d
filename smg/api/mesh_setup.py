"""How a gateway joins the mesh: the node's identity, its replicated documents, its actors.

`GatewayMesh` is built from the config tree. With `--enable-mesh` (or `smg node`) it runs a
`MeshNode` (membership + replication) and a `MeshSyncActor` (worker registry <-> directory);
with `--rate-limit-tokens-per-second` alone it still rate-limits, over a private document.

Secure by default: a mesh bound beyond loopback refuses to start without `--cluster-key`
(`ConfigError`, one line saying what to set); `--mesh-insecure` is the only way around, and it
logs a warning every minute while the mesh runs. A keyless loopback mesh reads nothing that does
not come from loopback.
"""

from __future__ import annotations

import math
import random
import socket
import time
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from smg.actors.mailbox import Overflow
from smg.actors.mesh_node import Leave, MeshNode, MeshView
from smg.actors.mesh_sync import Announce, DirectoryChanged, MeshSyncActor, spec_of
from smg.actors.mesh_transport import FaultPlan
from smg.actors.messages import AddWorker
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.api.mesh_routes import MeshCollector, MeshRoutes
from smg.api.rate_limiting import rate_limit_middleware
from smg.clock import Clock
from smg.config import ConfigError, GatewayConfig, MeshNodeConfig
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.mesh import cache_summary, rate_limit, worker_records
from smg.mesh.cache_summary import CacheSummaries
from smg.mesh.config import MeshConfig, is_loopback
from smg.mesh.identity import NodeIdentity
from smg.mesh.keyring import MAX_KEYS, MIN_SECRET_CHARS, Keyring
from smg.mesh.rate_limit import ClusterRateLimiter
from smg.mesh.replica import Replica
from smg.mesh.worker_records import HybridClock, WorkerDirectory
from smg.pipeline.policies.cache_aware import CacheAwareState
from smg.pipeline.prefix_hints import block_hashes

log = structlog.get_logger("smg.mesh")

WORKERS, RATE_LIMITS, CACHE = "workers", "rate_limits", "cache"
COMPACT_CHECK_INTERVAL_S = 60.0  # Replica.stats() rebuilds a document: not on every tick
INSECURE_WARNING_INTERVAL_S = 60.0
MAX_SERVER_NAME_CHARS = 200  # the node id (name@epoch.fingerprint) must fit a wire name


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
    if cfg.mesh_advertise_host:
        return cfg.mesh_advertise_host
    if cfg.mesh_host not in ("0.0.0.0", "::", ""):
        return cfg.mesh_host
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    log.warning("mesh_advertise_guessed", host=host, hint="set --mesh-advertise-host")
    return host


def seed_addrs(cfg: MeshNodeConfig) -> list[str]:
    out: list[str] = []
    for entry in cfg.mesh_peer_urls:
        for part in entry.replace(",", " ").split():
            part = part.removeprefix("http://").removeprefix("tcp://").rstrip("/")
            if ":" not in part:
                part = f"{part}:{cfg.mesh_port}"
            out.append(part)
    return out


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
        self._next_insecure_warning_s = 0.0
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
        self._summary_hashes: dict[tuple[str, str | tuple[int, ...]], list[bytes]] = {}
        self._registry_cell: SnapshotCell[RegistrySnapshot] | None = None
        self._next_cache_publish_s = 0.0
        # summaries are hints: refreshed a few times per push-pull period (5 s on the LAN profile)
        self.cache_publish_interval_s = max(
            1.0, MeshConfig.profile(cfg.mesh.mesh_profile).push_pull_interval_s / 6
        )
        self._seeded: dict[str, bytes] = {}  # summary key -> the bytes we last seeded from
        self._next_compact_check_s = 0.0
        self.compact_min_tombstone_bytes = 64 * 1024
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
        self.faults = FaultPlan() if mc.mesh_fault_injection else None
        self._node: MeshNode | None = None
        self._node_ref: ActorRef | None = None
        self._sync: ActorRef | None = None

    @property
    def cache_state(self) -> CacheAwareState | None:
        """The cache-aware policy's state (set when the policy is cache-aware)."""
        return self._cache_state

    @cache_state.setter
    def cache_state(self, state: CacheAwareState | None) -> None:
        self._cache_state = state
        if state is not None and self.keyring is not None:
            # summary hashes are keyed by the cluster: a prompt cannot be confirmed by guessing
            state.hints.secret = self.keyring.derive(b"smg cache summary hashes")

    # --- the request path -----------------------------------------------------------------------
    def middlewares(self) -> list[Any]:
        if self.limiter is None:
            return []
        return [rate_limit_middleware(self.limiter, self.wall, lambda: self.view.value.live_nodes)]

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
    ) -> None:
        if not self.enabled:
            return
        self._registry_cell = registry_cell
        self._sync = await core.start_child(
            ChildSpec(
                "mesh_sync",
                lambda: MeshSyncActor(
                    directory=self.directory,
                    hlc=self.hlc,
                    registry=registry,
                    registry_cell=registry_cell,
                ),
            )
        )
        self._node_ref = await core.start_child(
            ChildSpec(
                "mesh_node",
                self._make_node,
                capacity=8192,
                overflow=Overflow.DROP_OLDEST,
            )
        )
        log.info("mesh_joining", node=self.node_id, seeds=seed_addrs(self.cfg.mesh))

    def _make_node(self) -> MeshNode:
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
            on_doc_change=self._doc_changed,
            before_tick=self._flush,
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
        return list(dict.fromkeys([*seed_addrs(self.cfg.mesh), *seen]))

    def _flush(self, now: float) -> None:
        if self.insecure and now >= self._next_insecure_warning_s:
            self._next_insecure_warning_s = now + INSECURE_WARNING_INTERVAL_S
            log.warning(
                "mesh_insecure",
                mesh_host=self.cfg.mesh.mesh_host,
                detail="the mesh is unencrypted and unauthenticated: anyone who reaches "
                "this port joins the cluster and reads its state; set --cluster-key",
            )
        if self.limiter is not None:
            self.limiter.flush(self.wall())
        if now >= self._next_cache_publish_s:
            self._next_cache_publish_s = now + self.cache_publish_interval_s
            self._publish_cache_summaries()
        if now >= self._next_compact_check_s:
            self._next_compact_check_s = now + COMPACT_CHECK_INTERVAL_S
            self.compact_if_needed()

    def compact_if_needed(self) -> list[str]:
        """Bound tombstones: a document whose deleted items outweigh its live ones (and exceed
        `compact_min_tombstone_bytes`) starts a new generation. Dead nodes' worker records are
        adopted first so their workers stay served; a previous generation is released once no
        live owner is still missing from the new one. Returns the namespaces compacted."""
        live = {m.node_id for m in self.view.value.members if m.state in ("alive", "suspect")}
        compacted = []
        for name, replica in self.replicas.items():
            previous = replica.previous_owners()
            if previous and not previous & live:
                replica.release_previous()
            st = replica.stats()
            tombstones = st["tombstone_bytes"]
            if (
                tombstones > self.compact_min_tombstone_bytes
                and tombstones > st["state_bytes"] // 2
            ):
                if name == WORKERS:
                    self.directory.adopt_orphans(live)
                replica.compact()
                compacted.append(name)
                log.info("mesh_doc_compacted", namespace=name, tombstone_bytes=tombstones)
        return compacted

    def _doc_changed(self, namespace: str) -> None:
        if namespace == WORKERS and self._sync is not None and self._sync.alive:
            try:
                self._sync.tell(DirectoryChanged())
            except Exception:  # full: a reconcile is already queued
                pass
        elif namespace == CACHE:
            self._seed_from_summaries()

    # --- cache summaries: a node that joins or takes over starts warm ---------------------------
    def _workers(self) -> tuple[WorkerSnapshot, ...]:
        return self._registry_cell.value.workers if self._registry_cell is not None else ()

    def _publish_cache_summaries(self) -> None:
        """Hashes of what we routed to each worker, never the prompts (prefix_hints.py)."""
        state = self.cache_state
        if state is None:
            return
        memo, fresh = self._summary_hashes, {}
        for w in self._workers():
            recent = state.recent(w.worker_id)
            if not recent:
                continue
            model = w.model_id or ""
            hashes: list[bytes] = []
            for prefix in recent:
                h = memo.get((model, prefix))
                if h is None:
                    h = block_hashes(model, prefix, state.hints.secret)
                fresh[(model, prefix)] = h
                hashes += h
            # an unchanged summary writes nothing (Replica.put skips equal values)
            self.summaries.publish(w.url, hashes)
        self._summary_hashes = fresh  # bounded by what the workers' recent lists hold

    def _seed_from_summaries(self) -> None:
        state = self.cache_state
        if state is None:
            return
        by_url = {w.url: w for w in self._workers()}
        for url, hashes in self.summaries.changed(self._seeded):
            w = by_url.get(url)
            if w is not None:
                state.hints.learn(w.worker_id, hashes)

    # --- announcements from this node's API and command line ------------------------------------
    def announce_add(self, msg: AddWorker, snap: WorkerSnapshot) -> None:
        if self._sync is not None and self._sync.alive:
            self._sync.tell(Announce(snap.url, spec_of(msg, snap.url)))

    def announce_remove(self, snap: WorkerSnapshot) -> None:
        if self._sync is not None and self._sync.alive:
            self._sync.tell(Announce(snap.url, None))

    async def leave(self) -> None:
        """Graceful leave at shutdown: peers mark us LEFT instead of suspecting us."""
        if self._node_ref is not None and self._node_ref.alive:
            try:
                self._node_ref.tell(Leave())
            except Exception:
                return
            await self.clock.sleep(0.3)
