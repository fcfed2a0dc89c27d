"""The processes a bench starts: `smg sim` workers and `smg launch`, on free loopback ports.

`Stack` is a context manager: it starts the workers, waits for their /health, starts the gateway,
waits until its /v1/models lists the model, and on exit (errors and Ctrl-C included) stops each
process it started, by pid: SIGTERM, up to 10 s, then SIGKILL. Output goes to log files.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
MODEL = "fake-model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pids: list[int]) -> float:
    """User+system CPU seconds of the processes and their live children (all threads)."""
    total = 0.0
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs = [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
        for q in procs:
            try:
                t = q.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


def host_busy_s() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


class RssSampler(threading.Thread):
    """Peak RSS of one process, sampled every `interval_s`; `reset()` starts a new window."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.peak = 0
        self.stopped = threading.Event()

    def reset(self) -> None:
        self.peak = 0
        self._sample()

    def peak_mb(self) -> float:
        self._sample()
        return self.peak / 2**20

    def _sample(self) -> None:
        try:
            self.peak = max(self.peak, psutil.Process(self.pid).memory_info().rss)
        except psutil.Error:
            pass

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self._sample()


def _get(url: str, timeout_s: float = 2.0) -> tuple[int, bytes]:
    auth = os.environ.get("BENCH_AUTHORIZATION")  # overhead.py --api-key: /v1/models needs it
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, r.read()
    except OSError:
        return 0, b""


class Stack:
    def __init__(
        self,
        workers: int,
        policy: str,
        gateway_args: list[str],
        tokens_per_second: float,
        logdir: Path,
        python: str = sys.executable,
    ) -> None:
        self.n_workers = workers
        self.policy = policy
        self.gateway_args = gateway_args
        self.tokens_per_second = tokens_per_second
        self.logdir = logdir
        self.python = python
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.worker_urls: list[str] = []
        self.gateway_url = ""
        self.rss = RssSampler(0)  # replaced once the gateway runs
        self._old_term: object = None

    @property
    def gateway(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    def check_alive(self) -> None:
        """Raise if a process we started has exited (a crash, or a signal from outside)."""
        for p in self.procs:
            if p.poll() is not None:
                name = "gateway" if p is self.gateway else f"sim-{self.workers.index(p)}"
                how = f"signal {-p.returncode}" if p.returncode < 0 else f"status {p.returncode}"
                raise RuntimeError(f"{name} (pid {p.pid}) exited with {how}; see {self.logdir}")

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        # measure this checkout's smg (PYTHONSAFEPATH: not the working directory's)
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONSAFEPATH="1")
        with open(self.logdir / f"{name}.log", "wb") as log:
            p = subprocess.Popen(
                [self.python, "-m", "smg", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO,
                start_new_session=True,  # Ctrl-C reaches us only; we stop them in order
            )
        self.procs.append(p)
        return p

    def _wait(self, p: subprocess.Popen[bytes], name: str, url: str, needle: bytes) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited ({p.returncode}); see {self.logdir}/{name}.log")
            status, body = _get(url)
            if status == 200 and needle in body:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready at {url} after 60 s")

    def __enter__(self) -> Stack:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            for i in range(self.n_workers):
                port = free_port()
                args = ["sim", "--host", "127.0.0.1", "--port", str(port), "--model", MODEL]
                if self.tokens_per_second > 0:
                    args += ["--tokens-per-second", repr(self.tokens_per_second)]
                self.workers.append(self._spawn(f"sim-{i}", args))
                self.worker_urls.append(f"http://127.0.0.1:{port}")
            for i, (p, url) in enumerate(zip(self.workers, self.worker_urls, strict=True)):
                self._wait(p, f"sim-{i}", url + "/health", b"")
            port, mport = free_port(), free_port()
            gw = self._spawn(
                "gateway",
                [
                    "launch",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--worker-urls",
                    *self.worker_urls,
                    "--policy",
                    self.policy,
                    "--prometheus-host",
                    "127.0.0.1",
                    "--prometheus-port",
                    str(mport),
                    "--log-level",
                    "warn",
                    *self.gateway_args,
                ],
            )
            self.gateway_url = f"http://127.0.0.1:{port}"
            self._wait(gw, "gateway", self.gateway_url + "/v1/models", json.dumps(MODEL).encode())
            self.rss = RssSampler(gw.pid)
            self.rss.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self.rss.stopped.set()
        stop_all(self.procs)  # the gateway first, then its workers
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)  # type: ignore[arg-type]
            self._old_term = None


def stop_all(procs: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM the processes newest first, wait up to 10 s in all, kill the stragglers."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in reversed(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    procs.clear()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
