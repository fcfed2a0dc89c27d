"""Kubernetes worker discovery: an actor that owns the pod watch (a task in its own group) and
brings the worker registry in line with the pods it sees, through the same AddWorker /
RemoveWorker messages POST and DELETE /workers send.

The watch task runs the informer (smg/core/informer.py) over the API (actors/kube_pods.py) and
asks for a reconcile when the pod set changes; reconciles run in the actor, one at a time,
coalesced, and every `interval_s` besides. What to do is decided by the pure core
(smg/core/pods.py); this module only carries it out and counts it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smg.actors.messages import AddWorker, RemoveWorker
from smg.actors.pod_watch import PodSource, PodWatch
from smg.actors.registry import DuplicateWorker
from smg.actors.runtime import Actor, ActorRef
from smg.config.discovery import DISCOVERED_BY_LABEL, POD_NAME_LABEL, POD_UID_LABEL
from smg.core.informer import Backoff, Informer
from smg.core.pods import (
    Desired,
    Owned,
    Rules,
    desired_workers,
    owned_key,
    plan,
    router_seeds,
)
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.core.worker_urls import InvalidWorkerUrl

log = structlog.get_logger("smg.discovery")

SOURCE = "kubernetes"
_ASK_TIMEOUT_S = 10.0


class DiscoveryMetrics:
    """The Rust gateway's discovery series (source="kubernetes")."""

    def __init__(self, reg: CollectorRegistry) -> None:
        self.registrations = Counter(
            "smg_discovery_registrations",
            "Worker registrations by discovery source and result",
            ["source", "result"],
            registry=reg,
        )
        self.deregistrations = Counter(
            "smg_discovery_deregistrations",
            "Worker deregistrations by discovery source and reason",
            ["source", "reason"],
            registry=reg,
        )
        self.sync_duration = Histogram(
            "smg_discovery_sync_duration_seconds", "Discovery sync duration by source", ["source"],
            registry=reg,
        )  # fmt: skip
        self.discovered = Gauge(
            "smg_discovery_workers_discovered", "Workers known via discovery by source", ["source"],
            registry=reg,
        )  # fmt: skip
        self.watch_restarts = Counter(
            "smg_discovery_watch_restarts",
            "Pod watch streams resumed (reason: dropped) or re-listed after 410 Gone (gone)",
            ["source", "reason"],
            registry=reg,
        )


@dataclass(frozen=True, slots=True)
class _Reconcile:
    pass


RECONCILE = _Reconcile()


class DiscoveryActor(Actor):
    def __init__(
        self,
        *,
        rules: Rules,
        connect: Callable[[], Awaitable[PodSource]],
        registry: ActorRef,
        registry_cell: SnapshotCell[RegistrySnapshot],
        metrics: DiscoveryMetrics,
        interval_s: float,
        rng: random.Random,
        boot_id: str,
        check_url: Callable[[str], object] | None = None,
        connect_routers: Callable[[], Awaitable[PodSource]] | None = None,
        join: Callable[[list[str]], None] | None = None,
        detect: Callable[[str], Awaitable[str | None]] | None = None,
        backoff: Backoff = Backoff(),
    ) -> None:
        super().__init__()
        self.rules = rules
        self.connect = connect
        self.registry = registry
        self.registry_cell = registry_cell
        self.metrics = metrics
        self.interval_s = interval_s
        self.rng = rng
        self.backoff = backoff
        self.boot_id = boot_id  # this process's mark on the workers it adds
        self.check_url = check_url  # the worker address policy (raises InvalidWorkerUrl)
        self._refused: set[str] = set()  # URLs the policy refused (logged once)
        self.connect_routers = connect_routers
        self.join = join  # the mesh's seeds: router pods' mesh addresses go there
        self._seeded: set[str] = set()
        self.detect = detect  # a bare host:port's protocol (rules.scheme ""), HTTP first
        self.owned: dict[str, Owned] = {}
        self._pending = False

    async def on_start(self) -> None:
        # a restarted actor takes back the workers this process's discovery added before (their
        # labels say so); another gateway's (imported through the mesh) are not its own
        for w in self.registry_cell.value.workers:
            labels = dict(w.labels)
            if labels.get(DISCOVERED_BY_LABEL) == self.boot_id and POD_UID_LABEL in labels:
                self.owned[owned_key(w.url, self.rules)] = Owned(w.worker_id, labels[POD_UID_LABEL])
        self.workers_watch = self._make_watch("workers", self.connect, self._workers_changed)
        self.spawn(self.workers_watch.run(), name="discovery-watch")
        if self.connect_routers is not None and self.join is not None:
            watch = self._make_watch("routers", self.connect_routers, self._routers_changed)
            self.spawn(watch.run(), name="discovery-router-watch")
        self.every(self.interval_s, RECONCILE)

    def _make_watch(
        self,
        name: str,
        connect: Callable[[], Awaitable[PodSource]],
        on_change: Callable[[Informer], None],
    ) -> PodWatch:
        return PodWatch(
            name,
            connect,
            on_change,
            clock=self.clock,
            rng=self.rng,
            restarts=self.metrics.watch_restarts,
            backoff=self.backoff,
        )

    async def handle(self, message: Any) -> Any:
        match message:
            case _Reconcile():
                self._pending = False
                if self.workers_watch.informer.synced:
                    await self._reconcile()
                return None
            case _:
                raise TypeError(f"DiscoveryActor: unexpected message {message!r}")

    # --- the watches --------------------------------------------------------------------------
    def _workers_changed(self, informer: Informer) -> None:
        if not self._pending:
            self._pending = True
            self.ref.tell(RECONCILE)

    def _routers_changed(self, informer: Informer) -> None:
        """Router pods: each Ready one's mesh address joins the mesh's seeds (once)."""
        if self.join is None:
            return
        seeds = router_seeds(informer.pods.values(), self.rules)
        new = sorted(seeds - self._seeded)
        if new:
            self._seeded |= set(new)
            log.info("discovery_router_seeds", seeds=new)
            self.join(new)

    async def _detect(self, bare: list[str]) -> dict[str, str | None]:
        """Each bare host:port's protocol (all probed at once)."""
        if not bare:
            return {}
        if self.detect is None:
            return dict.fromkeys(bare, "http")
        detect = self.detect

        async def one(hp: str) -> str | None:
            return await detect(hp)

        async with asyncio.TaskGroup() as tg:
            tasks = {hp: tg.create_task(one(hp)) for hp in bare}
        return {hp: t.result() for hp, t in tasks.items()}

    async def _add(self, url: str, d: Desired) -> None:
        labels = (
            (DISCOVERED_BY_LABEL, self.boot_id),
            (POD_NAME_LABEL, d.pod_name),
            (POD_UID_LABEL, d.pod_uid),
        )
        msg = AddWorker(
            url=url,
            worker_type=d.worker_type,
            model_id=d.model_id,
            bootstrap_port=d.bootstrap_port,
            labels=labels,
        )
        try:
            snap = await self.registry.ask(msg, _ASK_TIMEOUT_S)
        except DuplicateWorker:  # registered by someone else: not discovery's to manage
            self.metrics.registrations.labels(SOURCE, "failed").inc()
            log.info("discovery_worker_exists", url=url)
            return
        except Exception as exc:  # AskTimeout, ActorStopped, a refusal: the next pass retries
            self.metrics.registrations.labels(SOURCE, "failed").inc()
            log.warning("discovery_add_failed", url=url, error=type(exc).__name__)
            return
        self.owned[d.url] = Owned(snap.worker_id, d.pod_uid)
        self.metrics.registrations.labels(SOURCE, "success").inc()
        log.info("discovery_worker_added", url=url, worker_id=snap.worker_id, pod=d.pod_name)

    def _allowed(self, url: str) -> bool:
        """The address policy POST /workers applies (--worker-url-allowlist/denylist)."""
        if self.check_url is None:
            return True
        try:
            self.check_url(url)
        except InvalidWorkerUrl as exc:
            if url not in self._refused:
                self._refused.add(url)
                self.metrics.registrations.labels(SOURCE, "failed").inc()
                log.warning("discovery_url_refused", url=url, error=str(exc))
            return False
        self._refused.discard(url)
        return True

    # --- the reconcile --------------------------------------------------------------------------
    async def _reconcile(self) -> None:
        start = self.clock.now()
        present = self.registry_cell.value.by_id
        for url, o in list(self.owned.items()):
            if o.worker_id not in present:  # removed by someone else (DELETE /workers)
                del self.owned[url]
        desired = desired_workers(self.workers_watch.informer.pods.values(), self.rules)
        todo = plan(desired, self.owned)
        self.metrics.discovered.labels(SOURCE).set(len(desired))
        if todo.empty:
            return
        log.info("discovery_reconcile", add=len(todo.add), remove=len(todo.remove))
        for url in todo.remove:
            owned = self.owned[url]
            try:
                await self.registry.ask(RemoveWorker(owned.worker_id), _ASK_TIMEOUT_S)
            except Exception as exc:  # still owned: the next reconcile tries again
                log.warning("discovery_remove_failed", url=url, error=type(exc).__name__)
                continue
            del self.owned[url]
            self.metrics.deregistrations.labels(SOURCE, "reconciled").inc()
            log.info("discovery_worker_removed", url=url, worker_id=owned.worker_id)
        adds = [d for d in todo.add if self._allowed(_with_scheme(d.url, "http"))]
        schemes = await self._detect([d.url for d in adds if "://" not in d.url])
        for d in adds:
            url = d.url
            if "://" not in url:
                scheme = schemes.get(url)
                if scheme is None:  # neither HTTP nor gRPC answered yet: the next pass retries
                    log.info("discovery_protocol_unknown", url=url, pod=d.pod_name)
                    continue
                url = _with_scheme(url, scheme)
            await self._add(url, d)
        self.metrics.sync_duration.labels(SOURCE).observe(self.clock.now() - start)


def _with_scheme(url: str, scheme: str) -> str:
    return url if "://" in url else f"{scheme}://{url}"
