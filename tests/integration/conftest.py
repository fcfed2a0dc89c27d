"""Process fixtures for the integration suite: real `smg sim` workers and `smg launch` gateways.

Every process runs as `sys.executable -m smg ...` on 127.0.0.1 with its stdout and stderr in a file
under the test's tmp dir. Starting waits (with a deadline) until the process answers: a worker's
`/health`, a gateway's `/workers` listing every expected worker as ready. Teardown always stops
what was started (SIGTERM, then SIGKILL past a deadline). When a test fails, the tail of every live
process's log is attached to its report.

Helpers are synchronous (urllib and the sync `openai` client); tests get concurrency from threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import openai
import pytest
from support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
# Generous: on 2 cores with 3 test workers each starting engines, a process has once taken
# over 20 s to start listening (CI, gateway log still empty). A passing start takes ~1-3 s.
START_DEADLINE_S = 45.0
STOP_DEADLINE_S = 5.0
POLL_S = 0.05
LOG_TAIL_LINES = 80
T = TypeVar("T")


class ProcessDied(AssertionError):
    def __init__(self, proc: Proc) -> None:
        super().__init__(
            f"{proc.name} exited with {proc.popen.returncode} while starting:\n{proc.log_tail()}"
        )
        self.proc = proc


def drive_pd_requests(gw: Gateway, messages: list[dict[str, str]]) -> None:
    """A chat, a streamed chat and a completion through a PD gateway; each must come back whole
    (the decode leg's answer)."""
    client = gw.client()
    done = client.chat.completions.create(model="sim-model", messages=messages, max_tokens=8)
    assert done.choices[0].message.content
    assert done.usage is not None and done.usage.completion_tokens == 8  # the decode answer
    chunks = list(
        client.chat.completions.create(
            model="sim-model", messages=messages, max_tokens=6, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].choices[0].finish_reason == "length"
    comp = client.completions.create(model="sim-model", prompt="abc", max_tokens=3)
    assert comp.choices[0].text


def kill_mid_stream(
    it: Iterator[Any], a: Any, b: Any
) -> tuple[Any, Any, int, float, openai.APIError]:
    """With a stream open on one of two backends (`in_flight` tells which), SIGKILL that one and
    drain the stream: (victim, survivor, chunks still received, seconds until the error, the
    error)."""
    victim, other = (a, b) if a.stats()["in_flight"] == 1 else (b, a)
    assert victim.stats()["in_flight"] == 1 and other.stats()["in_flight"] == 0
    victim.kill()
    killed_at = time.monotonic()
    received = 0
    with pytest.raises(openai.APIError) as info:
        for _ in it:
            received += 1
    return victim, other, received, time.monotonic() - killed_at, info.value


def wait_until(
    predicate: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = POLL_S
) -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ProcessDied:
            raise
        except Exception as exc:  # a probe that fails is just "not yet"
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{detail}")
        time.sleep(interval_s)


def wait_completed(
    count: int, *backends: Sim | Engine, timeout_s: float = 5.0
) -> list[dict[str, int]]:
    """Each backend's stats once every one counts exactly `count` calls completed. A sim counts
    a call completed only after its last message is sent (and a PD prefill leg runs beside the
    decode one), so a client holding its answer may read the count first: wait, never read it
    at once."""

    def settled() -> list[dict[str, int]] | None:
        stats = [b.stats() for b in backends]
        return stats if all(s["completed"] == count for s in stats) else None

    return wait_until(settled, timeout_s, f"{count} calls completed on each backend")


# --- plain HTTP ----------------------------------------------------------------------------------


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        low = name.lower()
        for k, v in self.headers.items():
            if k.lower() == low:
                return v
        return None


def http(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    context: ssl.SSLContext | None = None,
) -> Resp:
    """One request with urllib; non-2xx answers are returned, not raised.

    `body`: bytes as they are, an iterable of bytes (sent chunked), anything else as JSON.
    `context`: for https:// URLs (the CA to trust, a client certificate)."""
    hdrs = dict(headers or {})
    data: Any = None
    if body is not None:
        if isinstance(body, bytes | Iterator):
            data = body
        else:
            data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=context) as r:
            return Resp(r.status, dict(r.headers.items()), r.read())
    except urllib.error.HTTPError as e:
        with e:
            return Resp(e.code, dict(e.headers.items()), e.read())


def assert_openai_error(resp: Resp, status: int, code: str, param: str | None = None) -> dict:
    """The answer has `status` and an OpenAI error body with the given stable `code`."""
    assert resp.status == status, (resp.status, resp.body[:500])
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] == code, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    if param is not None:
        assert err["param"] == param, err
    return err


def flat_error(resp: Resp, status: int, code: str) -> None:
    """The /workers error shape (the Rust gateway's): `{"error": "...", "code": "..."}`."""
    assert resp.status == status, (resp.status, resp.body)
    body = resp.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]


# --- processes -----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<no log: {exc}>"
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, sig: int) -> None:
        if self.alive:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap."""
        self.signal(signal.SIGKILL)
        self.popen.wait(STOP_DEADLINE_S)

    def dump_stacks(self) -> None:
        """SIGABRT a process that is stuck: faulthandler (PYTHONFAULTHANDLER) writes every
        thread's stack to its log, which the failure report shows."""
        if self.alive:
            self.popen.send_signal(signal.SIGABRT)
            try:
                self.popen.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                pass


def _spawn(name: str, argv: list[str], log_path: Path) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMG_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a stuck process's stacks on SIGABRT (Proc.dump_stacks)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(
            [sys.executable, "-m", "smg", *argv],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal does not reach it
        )
    return Proc(name, argv, log_path, popen)


def _flags(options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list | tuple) and value and isinstance(value[0], list | tuple):
            for entry in value:  # a repeatable flag: `--prefill URL PORT --prefill URL`
                out += [flag, *map(str, entry)]
        elif isinstance(value, list | tuple):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


@dataclass
class Sim:
    proc: Proc
    port: int
    model: str
    context: ssl.SSLContext | None = None  # an HTTPS sim (`tls_cert_path=`): how to reach it

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, int]:
        r = http("GET", self.url + "/sim/stats", context=self.context)
        assert r.status == 200, r
        return r.json()

    def configure(self, **changes: Any) -> dict[str, Any]:
        r = http("POST", self.url + "/sim/config", changes, context=self.context)
        assert r.status == 200, r
        return r.json()

    def set_healthy(self, healthy: bool) -> None:
        r = http("POST", self.url + "/sim/health", {"healthy": healthy}, context=self.context)
        assert r.status == 200, r

    def kill(self) -> None:
        self.proc.kill()


@dataclass
class Engine:
    """A simulated gRPC engine (`smg sim --grpc`); its counters are served on `stats_port`."""

    proc: Proc
    port: int
    stats_port: int
    model: str
    runtime: str
    tls: bool = False  # serves gRPC over TLS (`tls_cert_path=`)

    @property
    def url(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, int]:
        r = http("GET", f"http://127.0.0.1:{self.stats_port}/sim/stats", timeout_s=2.0)
        assert r.status == 200, r
        return r.json()

    def kill(self) -> None:
        self.proc.kill()


_METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _METRIC_LINE.match(line)
        if m:
            labels = dict(_LABEL.findall(m["labels"] or ""))
            samples.append((m["name"], labels, float(m["value"])))
    return samples


@dataclass
class Gateway:
    proc: Proc
    port: int
    metrics_port: int
    api_key: str | None
    context: ssl.SSLContext | None = None  # a TLS gateway (`tls_cert_path=`): how to reach it

    @property
    def scheme(self) -> str:
        return "https" if self.context else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        timeout_s: float = 10.0,
    ) -> Resp:
        hdrs = {**(self.auth() if auth else {}), **(headers or {})}
        url = self.url + path
        return http(method, url, body, headers=hdrs, timeout_s=timeout_s, context=self.context)

    def client(self, timeout_s: float = 15.0) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.url + "/v1",
            api_key=self.api_key or "x",
            max_retries=0,
            timeout=timeout_s,
            http_client=openai.DefaultHttpxClient(verify=self.context) if self.context else None,
        )

    def workers(self) -> list[dict[str, Any]]:
        r = self.request("GET", "/workers")
        assert r.status == 200, r
        return r.json()["workers"]

    def worker_by_url(self, url: str) -> dict[str, Any] | None:
        return next((w for w in self.workers() if w["url"] == url), None)

    def wait_ready(self, n: int, timeout_s: float = START_DEADLINE_S) -> None:
        """Until at least `n` workers are ready (and /readiness agrees when n > 0)."""

        def ready() -> bool:
            if not self.proc.alive:
                raise ProcessDied(self.proc)
            if n == 0:
                return self.request("GET", "/health").status == 200
            healthy = [w for w in self.workers() if w["status"] == "ready"]
            return len(healthy) >= n and self.request("GET", "/readiness").status == 200

        try:
            wait_until(ready, timeout_s, f"{self.proc.name}: {n} ready worker(s)")
        except ProcessDied:
            raise
        except AssertionError:
            self.proc.dump_stacks()
            raise

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        url = f"{self.scheme}://127.0.0.1:{self.metrics_port}/metrics"
        r = http("GET", url, context=self.context)
        assert r.status == 200, r
        return parse_metrics(r.body.decode())

    def metric(self, name: str, **labels: str) -> float | None:
        for n, lab, value in self.metrics():
            if n == name and all(lab.get(k) == v for k, v in labels.items()):
                return value
        return None


def _address_in_use(proc: Proc) -> bool:
    tail = proc.log_tail(400).lower()
    return "address already in use" in tail or "failed to bind" in tail


class Launcher:
    """Starts processes for one test (or one module) and stops them all at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []
        self._seq = 0

    def _log(self, name: str) -> Path:
        self._seq += 1
        return self.tmp / f"{self._seq:02d}-{name}.log"

    def _start(self, name: str, argv: list[str]) -> Proc:
        proc = _spawn(name, argv, self._log(name))
        self.procs.append(proc)
        return proc

    def sims(
        self, *models: str, context: ssl.SSLContext | None = None, **options: Any
    ) -> list[Sim]:
        """Start one worker per model name, in parallel; return once each answers /health.
        An HTTPS worker (`tls_cert_path=`...) is reached with `context`."""
        started = [self._start_sim(model, options, context) for model in models]
        return [self._wait_sim(sim, options) for sim in started]

    def sim(
        self, model: str = "sim-model", *, context: ssl.SSLContext | None = None, **options: Any
    ) -> Sim:
        return self.sims(model, context=context, **options)[0]

    def _start_sim(
        self, model: str, options: dict[str, Any], context: ssl.SSLContext | None = None
    ) -> Sim:
        port = int(options.get("port") or free_port())  # a given port: a restarted worker
        argv = ["sim", "--host", "127.0.0.1", "--port", str(port), "--model", model]
        rest = _flags({k: v for k, v in options.items() if k != "port"})
        proc = self._start(f"sim-{model}-{port}", argv + rest)
        return Sim(proc, port, model, context)

    def _wait_sim(self, sim: Sim, options: dict[str, Any], retries: int = 2) -> Sim:
        def up() -> bool:
            if not sim.proc.alive:
                raise ProcessDied(sim.proc)
            health = http("GET", sim.url + "/health", timeout_s=1.0, context=sim.context)
            return health.status in (200, 503)

        try:
            wait_until(up, START_DEADLINE_S, f"{sim.proc.name} to listen")
        except ProcessDied:
            if retries and _address_in_use(sim.proc):
                again = self._start_sim(sim.model, options, sim.context)
                return self._wait_sim(again, options, retries - 1)
            raise
        return sim

    def provider(self, vendor: str, model: str, **options: Any) -> Sim:
        """A provider stand-in (`smg sim --provider VENDOR`); return once it answers (it has no
        /health: its /sim/keys)."""
        port = free_port()
        argv = ["sim", "--provider", vendor, "--host", "127.0.0.1", "--port", str(port)]
        proc = self._start(f"{vendor}-{port}", [*argv, "--model", model, *_flags(options)])
        sim = Sim(proc, port, model)

        def up() -> bool:
            if not proc.alive:
                raise ProcessDied(proc)
            return http("GET", sim.url + "/sim/keys", timeout_s=1.0).status == 200

        wait_until(up, START_DEADLINE_S, f"{proc.name} to listen")
        return sim

    def engines(self, *models: str, runtime: str = "vllm", **options: Any) -> list[Engine]:
        """Start one gRPC engine per model name, in parallel; return once each is serving.
        Options are `smg sim --grpc` flags with underscores (`decode_ms_per_token=50`)."""
        started = [self.start_engine(model, runtime, **options) for model in models]
        return [self.wait_engine(engine, **options) for engine in started]

    def engine(self, model: str = "sim-model", runtime: str = "vllm", **options: Any) -> Engine:
        return self.engines(model, runtime=runtime, **options)[0]

    def start_engine(self, model: str, runtime: str = "vllm", **options: Any) -> Engine:
        """Spawn a gRPC engine without waiting for it (pair with `wait_engine`)."""
        port, stats_port = free_port(), free_port()
        argv = [
            "sim", "--grpc", "--runtime", runtime, "--host", "127.0.0.1", "--port", str(port),
            "--model", model, "--stats-port", str(stats_port),
        ]  # fmt: skip
        proc = self._start(f"engine-{runtime}-{model}-{port}", argv + _flags(options))
        return Engine(
            proc, port, stats_port, model, runtime, tls=bool(options.get("tls_cert_path"))
        )

    def wait_engine(self, engine: Engine, retries: int = 2, **options: Any) -> Engine:
        """Until the engine serves (its stats port answers: it starts after the gRPC server)."""

        def up() -> bool:
            if not engine.proc.alive:
                raise ProcessDied(engine.proc)
            engine.stats()
            return True

        try:
            wait_until(up, START_DEADLINE_S, f"{engine.proc.name} to serve")
        except ProcessDied:
            if retries and _address_in_use(engine.proc):
                again = self.start_engine(engine.model, engine.runtime, **options)
                return self.wait_engine(again, retries - 1, **options)
            raise
        return engine

    def gateway(
        self,
        workers: Iterable[Sim | Engine | str] = (),
        *,
        ready: int | None = None,
        api_key: str | None = None,
        retries: int = 2,
        prefill: Iterable[tuple[Sim | Engine | str, int | None]] = (),
        decode: Iterable[Sim | Engine | str] = (),
        command: str = "launch",
        context: ssl.SSLContext | None = None,
        processes: int = 1,
        **options: Any,
    ) -> Gateway:
        """Start a gateway in front of `workers`; wait until `ready` of them (default: all) are
        ready. Options are `smg launch` flags with underscores (`queue_size=0`). `prefill`
        ((worker, bootstrap port) pairs) and `decode` workers start it in PD mode. A TLS gateway
        (`tls_cert_path=`...) is reached with `context`. `processes`: its `--workers`."""
        urls = [w if isinstance(w, str) else w.url for w in workers]
        pd_prefill = [[w if isinstance(w, str) else w.url, p or "none"] for w, p in prefill]
        pd_decode = [[w if isinstance(w, str) else w.url] for w in decode]
        if pd_prefill or pd_decode:
            options = {
                "pd_disaggregation": True,
                "prefill": pd_prefill,
                "decode": pd_decode,
                **options,
            }
        port, mport = free_port(), free_port()
        flags: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": port,
            "policy": "round_robin",
            "prometheus_host": "127.0.0.1",
            "prometheus_port": mport,
            "health_check_interval_secs": 1,
            "health_success_threshold": 1,
            "health_check_timeout_secs": 2,
            "log_level": "info",
            "workers": processes,  # `--workers`: one gateway process unless a test asks
            "api_key": api_key,
            # gRPC workers' tokenizers (GetTokenizer) are cached here, never in ~/.cache
            "tokenizer_cache_dir": self.tmp / "tokenizer-cache",
            **options,
        }
        if urls:
            flags["worker_urls"] = urls
        total = len(urls) + len(pd_prefill) + len(pd_decode)
        proc = self._start(f"gateway-{port}", [command, *_flags(flags)])
        gw = Gateway(proc, port, mport, api_key, context)
        try:
            gw.wait_ready(total if ready is None else ready)
        except ProcessDied:
            if retries and _address_in_use(proc):
                again = total if ready is None else ready
                return self.gateway(
                    urls,
                    ready=again,
                    api_key=api_key,
                    retries=retries - 1,
                    command=command,
                    context=context,
                    processes=processes,
                    **options,
                )
            raise
        return gw

    def close(self) -> None:
        for p in self.procs:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            if p.alive:
                p.popen.kill()
                p.popen.wait(STOP_DEADLINE_S)


_LIVE: list[Launcher] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failed setup or call, attach the tail of each live process's log to the report."""
    rep = yield
    if rep.failed and rep.when in ("setup", "call"):
        for launcher in _LIVE:
            for p in launcher.procs:
                state = "running" if p.alive else f"exited {p.popen.returncode}"
                rep.sections.append((f"{p.name} ({state}) {p.log_path}", p.log_tail()))
    return rep


@contextlib.contextmanager
def _launcher(tmp: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp)
    _LIVE.append(launcher)
    try:
        yield launcher
    finally:
        _LIVE.remove(launcher)
        launcher.close()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    """Processes for one test."""
    with _launcher(tmp_path) as launcher:
        yield launcher


@pytest.fixture(scope="module")
def module_launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Processes shared by the tests of one module."""
    with _launcher(tmp_path_factory.mktemp("procs")) as launcher:
        yield launcher
