"""Kubernetes worker discovery: an actor that owns the pod watch (a task in its own group) and
brings the worker registry in line with the pods it sees, through the same AddWorker /
RemoveWorker messages POST and DELETE /workers send.

The watch task runs the informer (smg/core/informer.py) over the API (actors/kube_pods.py) and
asks for a reconcile when the pod set changes; reconciles run in the actor, one at a time,
coalesced, and every `interval_s` besides. What to do is decided by the pure core
(smg/core/pods.py); this module only carries it out and counts it.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smg.actors.kube_pods import Gone
from smg.actors.messages import AddWorker, RemoveWorker
from smg.actors.registry import DuplicateWorker
from smg.actors.runtime import Actor, ActorRef, ActorStopped, AskTimeout
from smg.config.discovery import DISCOVERED_BY_LABEL, POD_NAME_LABEL, POD_UID_LABEL
from smg.core.informer import Backoff, Informer, Step
from smg.core.pods import Owned, Rules, desired_workers, plan
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.core.worker_urls import InvalidWorkerUrl

log = structlog.get_logger("smg.discovery")

SOURCE = "kubernetes"
_ASK_TIMEOUT_S = 10.0


class PodSource(Protocol):
    async def list(self) -> tuple[list[Any], str]: ...
    def watch(
        self, resource_version: str, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[Any]: ...
    async def close(self) -> None: ...


class DiscoveryMetrics:
    """The Rust gateway's discovery series (source="kubernetes")."""

    def __init__(self, registry: CollectorRegistry) -> None:
        reg = registry
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
        self.informer = Informer()
        self.owned: dict[str, Owned] = {}
        self._pending = False
        self._attempt = 0  # failures in a row: the backoff's exponent

    async def on_start(self) -> None:
        # a restarted actor takes back the workers this process's discovery added before (their
        # labels say so); another gateway's (imported through the mesh) are not its own
        for w in self.registry_cell.value.workers:
            labels = dict(w.labels)
            if labels.get(DISCOVERED_BY_LABEL) == self.boot_id and POD_UID_LABEL in labels:
                self.owned[w.url] = Owned(w.worker_id, labels[POD_UID_LABEL])
        self.spawn(self._watch(), name="discovery-watch")
        self.every(self.interval_s, RECONCILE)

    async def handle(self, message: Any) -> Any:
        match message:
            case _Reconcile():
                self._pending = False
                if self.informer.synced:
                    await self._reconcile()
                return None
            case _:
                raise TypeError(f"DiscoveryActor: unexpected message {message!r}")

    # --- the watch ------------------------------------------------------------------------------
    def _changed(self, step: Step) -> None:
        if step is not Step.CHANGED:
            return
        if not self._pending:
            self._pending = True
            self.ref.tell(RECONCILE)

    async def _watch(self) -> None:
        source: PodSource | None = None
        try:
            while source is None:
                try:
                    source = await self.connect()
                except Exception as exc:  # no config yet, unreadable token: keep trying
                    log.warning("discovery_config_failed", error=str(exc)[:300])
                    await self._back_off()
            self._attempt = 0
            relist = True
            while True:
                try:
                    if relist:
                        items, rv = await source.list()
                        self._changed(self.informer.relisted(items, rv))
                        relist = False
                    if await self._follow(source):
                        relist = True
                        self.metrics.watch_restarts.labels(SOURCE, "gone").inc()
                        log.info("discovery_relist", reason="410 Gone")
                        continue
                    reason = "ended"
                except Gone:
                    relist, reason = True, "410 Gone"
                except Exception as exc:
                    reason = f"{type(exc).__name__}: {str(exc)[:200]}"
                self.metrics.watch_restarts.labels(SOURCE, "dropped").inc()
                log.info("discovery_watch_retry", reason=reason, attempt=self._attempt)
                await self._back_off()
        finally:
            if source is not None:
                await source.close()

    async def _back_off(self) -> None:
        """Wait before the next try: short after a stream that was accepted (the attempt count
        was reset then), growing while the API keeps failing."""
        delay = self.backoff.delay_s(self._attempt, self.rng)
        self._attempt += 1
        await self.clock.sleep(delay)

    def _opened(self) -> None:
        self._attempt = 0

    async def _follow(self, source: PodSource) -> bool:
        """Watch from the informer's resourceVersion until the stream ends or drops (raises);
        True when the server says the version is gone (410: list again)."""
        rv = self.informer.resource_version
        assert rv is not None
        async for ev in source.watch(rv, self._opened):
            step = self.informer.event(ev)
            if step is Step.RELIST:
                return True
            self._changed(step)
        return False

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
        desired = desired_workers(self.informer.pods.values(), self.rules)
        todo = plan(desired, self.owned)
        self.metrics.discovered.labels(SOURCE).set(len(desired))
        if todo.empty:
            return
        log.info("discovery_reconcile", add=len(todo.add), remove=len(todo.remove))
        for url in todo.remove:
            owned = self.owned[url]
            try:
                await self.registry.ask(RemoveWorker(owned.worker_id), _ASK_TIMEOUT_S)
            except (AskTimeout, ActorStopped) as exc:
                log.warning("discovery_remove_failed", url=url, error=type(exc).__name__)
                continue  # still owned: the next reconcile tries again
            del self.owned[url]
            self.metrics.deregistrations.labels(SOURCE, "reconciled").inc()
            log.info("discovery_worker_removed", url=url, worker_id=owned.worker_id)
        for d in todo.add:
            if not self._allowed(d.url):
                continue
            labels = (
                (DISCOVERED_BY_LABEL, self.boot_id),
                (POD_NAME_LABEL, d.pod_name),
                (POD_UID_LABEL, d.pod_uid),
            )
            msg = AddWorker(
                url=d.url,
                worker_type=d.worker_type,
                model_id=d.model_id,
                bootstrap_port=d.bootstrap_port,
                labels=labels,
            )
            try:
                snap = await self.registry.ask(msg, _ASK_TIMEOUT_S)
            except DuplicateWorker:  # registered by someone else: not discovery's to manage
                self.metrics.registrations.labels(SOURCE, "failed").inc()
                log.info("discovery_worker_exists", url=d.url)
                continue
            except (AskTimeout, ActorStopped) as exc:
                self.metrics.registrations.labels(SOURCE, "failed").inc()
                log.warning("discovery_add_failed", url=d.url, error=type(exc).__name__)
                continue
            self.owned[d.url] = Owned(snap.worker_id, d.pod_uid)
            self.metrics.registrations.labels(SOURCE, "success").inc()
            log.info("discovery_worker_added", url=d.url, worker_id=snap.worker_id, pod=d.pod_name)
        self.metrics.sync_duration.labels(SOURCE).observe(self.clock.now() - start)
