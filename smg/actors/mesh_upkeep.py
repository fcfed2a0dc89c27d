"""MeshUpkeep: what the mesh node does to its replicated documents on each tick, besides
replicating them.

- the rate limiter's local counts go into their document (`ClusterRateLimiter.flush`);
- a few times per push-pull period, the cache summaries: per worker, hashes of the prefixes this
  node routed there, never the prompts (`smg.pipeline.prefix_hints`), read from the cache-aware
  state the cache-index actor owns;
- once a minute, compaction: a document whose tombstones outweigh its live items starts a new
  generation (dead nodes' worker records adopted first, so their workers stay served);
- with `--mesh-insecure`, a warning every minute.

The `MeshNode` owns one and calls `tick(now)` from its own `Tick` handler: these are writes to
the node's own documents, made where the node makes all the others, not events between actors.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.mesh.cache_summary import CacheSummaries
from smg.mesh.rate_limit import ClusterRateLimiter
from smg.mesh.replica import Replica
from smg.mesh.worker_records import WorkerDirectory
from smg.pipeline.cache_state import CacheAwareState
from smg.pipeline.prefix_hints import block_hashes

log = structlog.get_logger("smg.mesh")

WORKERS = "workers"
COMPACT_CHECK_INTERVAL_S = 60.0  # Replica.stats() rebuilds a document: not on every tick
INSECURE_WARNING_INTERVAL_S = 60.0


class MeshUpkeep:
    def __init__(
        self,
        *,
        replicas: dict[str, Replica],
        directory: WorkerDirectory,
        summaries: CacheSummaries,
        live_members: Callable[[], set[str]],
        limiter: ClusterRateLimiter | None,
        wall: Callable[[], float],
        cache_publish_interval_s: float,
        insecure_host: str | None = None,
    ) -> None:
        """`live_members`: node ids alive or suspect in the node's view; `insecure_host`: the
        bind address to warn about (None: the mesh is keyed or loopback-only)."""
        self.replicas = replicas
        self.directory = directory
        self.summaries = summaries
        self.live_members = live_members
        self.limiter = limiter
        self.wall = wall
        self.cache_publish_interval_s = cache_publish_interval_s
        self.insecure_host = insecure_host
        self.cache_state: CacheAwareState | None = None  # read-only: the cache-index actor's
        self.registry: SnapshotCell[RegistrySnapshot] | None = None
        self.compact_min_tombstone_bytes = 64 * 1024
        self._summary_hashes: dict[tuple[str, str | tuple[int, ...]], list[bytes]] = {}
        self._next_cache_publish_s = 0.0
        self._next_compact_check_s = 0.0
        self._next_insecure_warning_s = 0.0

    def tick(self, now: float) -> None:
        if self.insecure_host is not None and now >= self._next_insecure_warning_s:
            self._next_insecure_warning_s = now + INSECURE_WARNING_INTERVAL_S
            log.warning(
                "mesh_insecure",
                mesh_host=self.insecure_host,
                detail="the mesh is unencrypted and unauthenticated: anyone who reaches "
                "this port joins the cluster and reads its state; set --cluster-key",
            )
        if self.limiter is not None:
            self.limiter.flush(self.wall())
        if now >= self._next_cache_publish_s:
            self._next_cache_publish_s = now + self.cache_publish_interval_s
            self.publish_cache_summaries()
        if now >= self._next_compact_check_s:
            self._next_compact_check_s = now + COMPACT_CHECK_INTERVAL_S
            self.compact_if_needed()

    def compact_if_needed(self) -> list[str]:
        """Bound tombstones: a document whose deleted items outweigh its live ones (and exceed
        `compact_min_tombstone_bytes`) starts a new generation. Dead nodes' worker records are
        adopted first so their workers stay served; a previous generation is released once no
        live owner is still missing from the new one. Returns the namespaces compacted."""
        live = self.live_members()
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

    def _workers(self) -> tuple[WorkerSnapshot, ...]:
        return self.registry.value.workers if self.registry is not None else ()

    def publish_cache_summaries(self) -> None:
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
            # only hashes new since the last publish are written (cache_summary's ring)
            self.summaries.publish(w.url, hashes)
        if self.registry is not None:  # a worker that left: its summary slots are cleared
            self.summaries.retain(w.url for w in self._workers())
        self._summary_hashes = fresh  # bounded by what the workers' recent lists hold
