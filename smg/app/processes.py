"""`--workers N`: the parent that runs N gateway processes on one port, and the child's shell.

The plan and the children's arguments are pure (smg/core/processes.py); this is the shell:

- the parent binds the port with SO_REUSEPORT and keeps that socket (bound, never listening:
  the kernel gives connections only to the children's listening sockets), so `--port 0`
  becomes one concrete port and nothing outside the group can take it while a child restarts;
- each child is `python -m smg launch <the user's flags> --workers 1 ...` (spawned, not forked:
  grpc is not fork-safe), in its own session so a terminal's Ctrl-C reaches the parent only,
  which forwards one SIGTERM; a child whose parent is gone stops by itself;
- the parent serves the one public `/metrics` (over TLS with the gateway's certificate when it
  has one), gathered from the children's private loopback metrics listeners (plain HTTP) with a
  `process` label, the scraper's credential passed on (the children judge it);
- a child that exits unexpectedly is started again with backoff (0.5 s doubling to 30 s);
  SIGTERM drains every child (each its grace period), then the parent exits, non-zero if a
  child did.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import structlog
from aiohttp import web

from smg import errors
from smg.api.listeners import bound_port
from smg.api.middleware import error_response
from smg.api.requests import new_request_id, request_id_of
from smg.app.gateway import Gateway
from smg.config import ConfigError, GatewayConfig
from smg.core import exposition
from smg.core.auth import Gate, RouteClass
from smg.core.processes import (
    DROPPED_ENV,
    KEY_ENV,
    PARENT_ENV,
    PEER_FLAGS,
    SLOT_ENV,
    Backoff,
    child_argv,
    cluster_mesh_args,
    cluster_mesh_port,
    private_mesh_args,
    without_options,
)
from smg.tls import ServerTls

log = structlog.get_logger("smg.processes")

START_TIMEOUT_S = 60.0  # every child listening, or the start fails
POLL_S = 0.1
SCRAPE_TIMEOUT_S = 2.0  # one child's /metrics
KILL_MARGIN_S = 5.0  # past the grace period, a child still running is killed
PORT_TRIES = 50
PARENT_POLL_S = 1.0


def reserve_port(host: str, port: int) -> socket.socket:
    """The group's port, bound with SO_REUSEPORT and held by the parent."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"--host {host}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--port {port}: failed to bind: {exc.strerror or exc}") from None
    return sock


def loopback_port(udp_too: bool = False) -> int:
    """A free loopback port (TCP, and UDP too for a mesh port: gossip and sync share it)."""
    for _ in range(PORT_TRIES):
        with socket.socket() as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = int(tcp.getsockname()[1])
            if not udp_too:
                return port
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise OSError("no free loopback port")


@dataclass(slots=True)
class Child:
    index: int
    mesh_port: int
    metrics_port: int
    proc: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: Backoff = field(default_factory=Backoff)


class ProcessGroup:
    def __init__(
        self, cfg: GatewayConfig, user_args: Sequence[str], count: int, *, cluster: bool = False
    ) -> None:
        self.cfg = cfg
        self.cluster = cluster  # the children join the user's cluster mesh (no private one)
        # in the user's cluster its peers reach the children through cluster_mesh_args
        self.user_args = without_options(user_args, PEER_FLAGS) if cluster else list(user_args)
        self.count = count
        self.key = secrets.token_urlsafe(32)  # the private mesh's key: this boot only
        self.children: list[Child] = []
        self.port = 0
        self.stopping = False
        # the public /metrics speaks TLS as the children's listener does (a bad certificate
        # fails here, before any child starts)
        tls = ServerTls.load(cfg.tls.tls_cert_path, cfg.tls.tls_key_path)
        self.metrics_tls = None if tls is None else tls.context
        self.gate = Gate.from_config(cfg)  # the public /metrics' gate (the scraper's address)

    # --- children ---------------------------------------------------------------------------
    def _mesh_port(self, index: int) -> int:
        if self.cluster:
            return cluster_mesh_port(self.cfg.mesh, index)
        return loopback_port(udp_too=True)

    def _env(self, child: Child) -> dict[str, str]:
        if self.cluster:  # the user's cluster: the user's key and peers, as the user set them
            env = dict(os.environ)
        else:
            env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
            env[KEY_ENV] = self.key
        env[SLOT_ENV] = f"{child.index}/{self.count}"
        env[PARENT_ENV] = str(os.getpid())
        return env

    async def _spawn(self, child: Child) -> None:
        if self.cluster:
            mesh_args = cluster_mesh_args(self.cfg.mesh, child.index, self.count)
        else:
            peers = [c.mesh_port for c in self.children if c is not child]
            mesh_args = private_mesh_args(child.mesh_port, peers)
        argv = child_argv(
            self.user_args, port=self.port, mesh_args=mesh_args, metrics_port=child.metrics_port
        )
        child.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "smg",
            *argv,
            env=self._env(child),
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # the terminal's Ctrl-C reaches the parent only
        )
        child.started_at = time.monotonic()
        log.info("process_started", process=child.index, pid=child.proc.pid)

    async def _listening(self, session: aiohttp.ClientSession, child: Child) -> bool:
        """The child answers on its metrics port (opened after the client listener)."""
        try:
            async with session.get(f"http://127.0.0.1:{child.metrics_port}/metrics") as resp:
                return resp.status > 0
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _wait_started(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> int:
        """0 once every child listens; else the exit status to end with."""
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(self.children)
        while waiting:
            for child in list(waiting):
                assert child.proc is not None
                if child.proc.returncode is not None:
                    log.error("process_failed_to_start", process=child.index)
                    return child.proc.returncode or 1
                if await self._listening(session, child):
                    waiting.remove(child)
            if stop.is_set():
                return 0
            if time.monotonic() > deadline:
                log.error("processes_start_timeout", waiting=[c.index for c in waiting])
                return 1
            if waiting:
                await asyncio.sleep(POLL_S)
        return 0

    async def _watch(self, child: Child, stop: asyncio.Event) -> None:
        """Start `child` again (with backoff) each time it exits while the group serves."""
        while True:
            assert child.proc is not None
            status = await child.proc.wait()
            if self.stopping:
                return
            lived = time.monotonic() - child.started_at
            delay = child.backoff.next_delay(lived)
            log.warning("process_exited", process=child.index, status=status, restart_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if self.stopping or stop.is_set():
                return
            if not self.cluster:  # (in the user's cluster a child keeps its address)
                child.mesh_port = loopback_port(udp_too=True)
            child.metrics_port = loopback_port()
            child.restarts += 1
            await self._spawn(child)

    async def _stop_all(self) -> int:
        """SIGTERM every child, wait for their drain; 0 if every one exited 0."""
        self.stopping = True
        procs = [c.proc for c in self.children if c.proc is not None]
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        limit = self.cfg.server.shutdown_grace_period_secs + KILL_MARGIN_S
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), limit)
        except TimeoutError:
            for proc in procs:
                if proc.returncode is None:
                    log.error("process_killed", pid=proc.pid, after_s=limit)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), KILL_MARGIN_S)
        failed = [p.returncode for p in procs if p.returncode != 0]
        log.info("processes_stopped", failed=failed)
        return 1 if failed else 0

    # --- the one /metrics ---------------------------------------------------------------------
    async def _scrape(
        self, session: aiohttp.ClientSession, child: Child, auth: str | None
    ) -> tuple[int, str]:
        headers = {"Authorization": auth} if auth else {}
        try:
            async with session.get(
                f"http://127.0.0.1:{child.metrics_port}/metrics", headers=headers
            ) as resp:
                return resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return 0, ""  # restarting: left out of this scrape

    def _own_metrics(self) -> str:
        alive = sum(1 for c in self.children if c.proc is not None and c.proc.returncode is None)
        lines = [
            "# HELP smg_gateway_processes Gateway processes running (--workers)",
            "# TYPE smg_gateway_processes gauge",
            f"smg_gateway_processes {alive}",
            "# HELP smg_gateway_process_restarts_total Unexpected exits of a gateway process",
            "# TYPE smg_gateway_process_restarts_total counter",
            *(
                f'smg_gateway_process_restarts_total{{process="{c.index}"}} {c.restarts}'
                for c in self.children
            ),
        ]
        return "\n".join(lines) + "\n"

    async def _serve_metrics(self, session: aiohttp.ClientSession) -> web.AppRunner | None:
        obs = self.cfg.observability
        if obs.prometheus_port <= 0:
            return None

        async def metrics(request: web.Request) -> web.Response:
            # the children see the parent's loopback connection, not the scraper: who may scrape
            # is judged here, as a single process's metrics gate judges it (loopback only while
            # no control-plane credential is configured); a credential is judged (and a JWT
            # verified) by the children, to whom it is passed on
            try:
                self.gate.decide(
                    RouteClass.METRICS, request.method, request.headers, request.remote
                )
            except errors.ApiError as err:
                return error_response(err, request_id_of(request) or "req-" + new_request_id())
            auth = request.headers.get("Authorization")
            answers = await asyncio.gather(*(self._scrape(session, c, auth) for c in self.children))
            for status, text in answers:
                if status in (401, 403):  # the children judge the credential
                    return web.Response(status=status, text=text, content_type="application/json")
            pairs = zip(self.children, answers, strict=True)
            texts = [(str(c.index), text) for c, (status, text) in pairs if status == 200]
            body = exposition.merge(texts) + self._own_metrics()
            return web.Response(
                body=body.encode(), headers={"Content-Type": "text/plain; version=0.0.4"}
            )

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host = obs.prometheus_host or ("::" if ":" in self.cfg.server.host else "0.0.0.0")
        site = web.TCPSite(
            runner, host, obs.prometheus_port, reuse_address=True, ssl_context=self.metrics_tls
        )
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        log.info("processes_metrics_listening", port=bound_port(site))
        return runner

    # --- lifespan -----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> int:
        with reserve_port(self.cfg.server.host, self.cfg.server.port) as sock:
            self.port = int(sock.getsockname()[1])
            self.children = [
                Child(i, self._mesh_port(i), loopback_port()) for i in range(self.count)
            ]
            timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                try:
                    return await self._serve(session, stop)
                finally:  # whatever went wrong here, no child outlives the parent's run
                    if not self.stopping:
                        await self._stop_all()

    async def _serve(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> int:
        for child in self.children:
            await self._spawn(child)
        status = await self._wait_started(session, stop)
        if status or stop.is_set():
            return await self._stop_all() or status
        try:
            metrics = await self._serve_metrics(session)
        except OSError as exc:
            port = self.cfg.observability.prometheus_port
            raise ConfigError(f"--prometheus-port {port}: failed to bind: {exc.strerror}") from None
        log.info("processes_listening", port=self.port, processes=self.count)
        try:
            async with asyncio.TaskGroup() as tg:
                for child in self.children:
                    tg.create_task(self._watch(child, stop), name=f"process-{child.index}")
                await stop.wait()
                return await self._stop_all()
        finally:
            if metrics is not None:
                await metrics.cleanup()


async def serve_child(cfg: GatewayConfig, index: int, parent_pid: int, stop: asyncio.Event) -> None:
    """One process of the group: a whole gateway on the shared port, its log lines carrying
    `process`, stopping by itself when its parent is gone."""
    structlog.contextvars.bind_contextvars(process=index)
    gateway = Gateway(cfg, reuse_port=True)  # a bad config fails here, unwrapped
    try:
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(watch_parent(parent_pid, stop), name="parent-watch")
            try:
                await gateway.run(stop)
            finally:
                watcher.cancel()
    except ExceptionGroup as group:  # one failure: raised as itself (ConfigError -> exit 2)
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """A child whose parent is gone (killed) stops: `stop` is set, and the gateway drains."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PARENT_POLL_S)
        if os.getppid() != parent_pid and not stop.is_set():
            log.warning("process_parent_gone", parent=parent_pid)
            stop.set()
