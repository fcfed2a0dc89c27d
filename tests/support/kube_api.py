"""An in-process Kubernetes API server for discovery tests: the pods part of the wire protocol.

`GET /api/v1/namespaces/{ns}/pods` and `GET /api/v1/pods`, with `labelSelector` (equality
terms), a list's `metadata.resourceVersion`, and `watch=1` from a `resourceVersion`
(`allowWatchBookmarks`, `timeoutSeconds`): chunked newline-delimited JSON events (ADDED,
MODIFIED, DELETED, BOOKMARK, ERROR). A watch sees an object enter or leave its selector as
ADDED / DELETED, as the real server sends them. resourceVersions increase by one per change; the
event history is bounded, and a watch from a resourceVersion older than it gets an ERROR event
whose Status is 410 Expired (as the real server answers), a list or watch with a bad token a
401 Status. Served over TLS (trustme) with a bearer token; `kubeconfig()` writes what a client
needs to reach it.

The server runs on its own event loop in a thread; the controls (`create_pod`, `update_pod`,
`terminate_pod`, `delete_pod`, `cut_watches`, `expire_history`) are called from the test's
thread and return once applied; `fail_lists` holds statuses the next lists answer with.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import ssl
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web

_BOOKMARK_EVERY_S = 0.5


@dataclass(eq=False)
class _Watch:
    namespace: str | None
    selector: dict[str, str]
    queue: asyncio.Queue[tuple[int, str, dict[str, Any] | None, dict[str, Any] | None]]
    response: web.StreamResponse
    task: asyncio.Task[Any] | None = None


@dataclass
class _Event:
    rv: int
    kind: str  # ADDED, MODIFIED or DELETED
    old: dict[str, Any] | None
    new: dict[str, Any] | None


def _parse_selector(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for term in filter(None, raw.split(",")):
        key, _, value = term.partition("=")
        out[key.strip()] = value.strip().lstrip("=")
    return out


def _matches(pod: dict[str, Any] | None, namespace: str | None, sel: dict[str, str]) -> bool:
    if pod is None:
        return False
    meta = pod["metadata"]
    if namespace is not None and meta["namespace"] != namespace:
        return False
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in sel.items())


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class KubeApi:
    folder: Path
    token: str = field(default_factory=lambda: "tok-" + uuid.uuid4().hex)
    history: int = 1000
    bookmark_every_s: float = _BOOKMARK_EVERY_S
    rv: int = 100
    compacted: int = 100  # a watch from a resourceVersion below this gets 410 Expired
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: deque[_Event] = field(default_factory=deque)
    watches: set[_Watch] = field(default_factory=set)
    requests: list[dict[str, str]] = field(default_factory=list)  # every API call's query
    port: int = 0
    fail_lists: list[int] = field(default_factory=list)  # statuses the next lists answer

    # --- lifecycle (test thread) ----------------------------------------------------------------
    def start(self) -> KubeApi:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_path = self.folder / "kube-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(self._ssl)
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="kube-api", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0):
            raise RuntimeError("the fake Kubernetes API did not start")
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.loop.run_forever()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()

    def stop(self) -> None:
        async def down() -> None:
            for w in list(self.watches):
                if w.task is not None:
                    w.task.cancel()
            await self._runner.cleanup()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(down(), self.loop).result(10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, token: str | None = None) -> Path:
        path = self.folder / "kubeconfig.json"  # JSON is YAML
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fake",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": "tester", "user": {"token": token or self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(cfg))
        return path

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10.0)

    # --- controls (test thread) -----------------------------------------------------------------
    def create_pod(
        self,
        name: str,
        *,
        ip: str,
        labels: dict[str, str],
        namespace: str = "default",
        annotations: dict[str, str] | None = None,
        ready: bool = True,
        phase: str = "Running",
    ) -> dict[str, Any]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "labels": dict(labels),
                "annotations": dict(annotations or {}),
            },
            "status": {"phase": phase, "podIP": ip, "conditions": _conditions(ready)},
        }
        return self._call(self._apply, "ADDED", None, pod)

    def update_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        ready: bool | None = None,
        labels: dict[str, str] | None = None,
        phase: str | None = None,
    ) -> dict[str, Any]:
        def change() -> dict[str, Any]:
            old = self.pods[f"{namespace}/{name}"]
            new = copy.deepcopy(old)
            if ready is not None:
                new["status"]["conditions"] = _conditions(ready)
            if labels is not None:
                new["metadata"]["labels"] = dict(labels)
            if phase is not None:
                new["status"]["phase"] = phase
            return self._apply("MODIFIED", old, new)

        return self._call(change)

    def terminate_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        """A graceful delete's first step: deletionTimestamp set (the pod still runs)."""

        def change() -> dict[str, Any]:
            old = self.pods[f"{namespace}/{name}"]
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
            return self._apply("MODIFIED", old, new)

        return self._call(change)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self._call(lambda: self._apply("DELETED", self.pods[f"{namespace}/{name}"], None))

    def cut_watches(self) -> int:
        """Drop every open watch stream mid-stream (the connection aborted); how many."""

        def cut() -> int:
            n = 0
            for w in list(self.watches):
                transport = w.response._req.transport if w.response._req else None  # type: ignore[attr-defined]
                if transport is not None:
                    transport.abort()
                    n += 1
            return n

        return int(self._call(cut))

    def open_watches(self) -> int:
        return int(self._call(lambda: len(self.watches)))

    def expire_history(self) -> None:
        """Compact: every resourceVersion before now is too old to watch from (410)."""

        def expire() -> None:
            self.rv += 1
            self.compacted = self.rv
            self.events.clear()

        self._call(expire)

    # --- state (server loop) --------------------------------------------------------------------
    def _apply(
        self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.rv += 1
        subject = new if new is not None else copy.deepcopy(old)
        assert subject is not None
        subject["metadata"]["resourceVersion"] = str(self.rv)
        key = f"{subject['metadata']['namespace']}/{subject['metadata']['name']}"
        if new is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = new
        ev = _Event(self.rv, kind, old, new if new is not None else subject)
        self.events.append(ev)
        while len(self.events) > self.history:
            self.compacted = self.events.popleft().rv
        for w in self.watches:
            w.queue.put_nowait((ev.rv, ev.kind, ev.old, ev.new))
        return copy.deepcopy(subject)

    # --- the API (server loop) ------------------------------------------------------------------
    async def _pods(self, request: web.Request) -> web.StreamResponse:
        q = dict(request.query)
        self.requests.append({"path": request.path, **q})
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(_status(401, "Unauthorized", "Unauthorized"), status=401)
        namespace = request.match_info.get("ns")
        sel = _parse_selector(q.get("labelSelector", ""))
        if q.get("watch", "").lower() in ("1", "true", "t"):
            return await self._watch(request, namespace, sel, q)
        if self.fail_lists:
            code = self.fail_lists.pop(0)
            reason = {410: "Expired", 500: "InternalError"}.get(code, "Failure")
            return web.json_response(_status(code, reason, f"list failed: {code}"), status=code)
        items = [copy.deepcopy(p) for p in self.pods.values() if _matches(p, namespace, sel)]
        body = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }
        return web.json_response(body)

    async def _watch(
        self,
        request: web.Request,
        namespace: str | None,
        sel: dict[str, str],
        q: dict[str, str],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        raw_rv = q.get("resourceVersion", "")
        timeout = float(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks", "").lower() in ("true", "1", "t")

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        start_rv = int(raw_rv) if raw_rv.isdigit() else 0
        if start_rv and start_rv < self.compacted:
            msg = f"too old resource version: {start_rv} ({self.compacted})"
            await send("ERROR", _status(410, "Expired", msg))
            await resp.write_eof()
            return resp
        w = _Watch(namespace, sel, asyncio.Queue(), resp, asyncio.current_task())
        self.watches.add(w)
        try:
            if not start_rv:  # "now": the current objects as ADDED first
                for p in list(self.pods.values()):
                    if _matches(p, namespace, sel):
                        await send("ADDED", copy.deepcopy(p))
            else:
                for ev in list(self.events):
                    if ev.rv > start_rv:
                        w.queue.put_nowait((ev.rv, ev.kind, ev.old, ev.new))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            last_rv = start_rv or self.rv
            while (left := deadline - loop.time()) > 0:
                try:
                    rv, kind, old, new = await asyncio.wait_for(
                        w.queue.get(), min(left, self.bookmark_every_s)
                    )
                except TimeoutError:
                    if bookmarks:
                        meta = {"resourceVersion": str(max(last_rv, self.rv))}
                        await send(
                            "BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": meta}
                        )
                    continue
                if rv <= last_rv:
                    continue
                last_rv = rv
                was, now = _matches(old, namespace, sel), _matches(new, namespace, sel)
                if kind == "DELETED":
                    if was:
                        await send("DELETED", copy.deepcopy(new) if new else {})
                elif was and now:
                    await send("MODIFIED", copy.deepcopy(new) if new else {})
                elif now:
                    await send("ADDED", copy.deepcopy(new) if new else {})
                elif was:
                    await send("DELETED", copy.deepcopy(new) if new else {})
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        finally:
            self.watches.discard(w)
        return resp


def _conditions(ready: bool) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": "True" if ready else "False"}]


@contextlib.contextmanager
def kube_api(folder: Path, **kwargs: Any) -> Iterator[KubeApi]:
    api = KubeApi(folder, **kwargs).start()
    try:
        yield api
    finally:
        api.stop()
