"""The pure PD helpers: --prefill entries, pair selection, bootstrap injection, readiness."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from support.runner_metrics import RecordingMetrics

from smg import cli
from smg.app.outbound import startup_workers
from smg.core.circuit_breaker import BreakerSnapshot, BreakerState
from smg.core.health import HealthStatus
from smg.core.readiness import missing_role
from smg.core.snapshots import LoadCounter, WorkerSnapshot
from smg.errors import ApiError
from smg.flow.pd_http import HttpPd
from smg.flow.render import RenderFactory
from smg.flow.request import Kind, Request
from smg.flow.runner import Pairing
from smg.pipeline import pd
from smg.pipeline.backends.http import HttpBackend, UpstreamError
from smg.pipeline.output import openai_renderer
from smg.pipeline.policies import RoundRobinPolicy, RouteRequest
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import parse_responses

ROUTE = RouteRequest(text=None, routing_key=None, model="m")


def w(
    url: str,
    wtype: str,
    *,
    port: int | None = None,
    health: HealthStatus = HealthStatus.READY,
    breaker: BreakerState = BreakerState.CLOSED,
) -> WorkerSnapshot:
    return WorkerSnapshot(
        worker_id=f"id-{url.rsplit(':', 1)[-1]}",
        url=url,
        model_id="m",
        worker_type=wtype,
        health=health,
        breaker=BreakerSnapshot(breaker, 1e9 if breaker is BreakerState.OPEN else None),
        counter=LoadCounter(),
        bootstrap_port=port,
    )


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("http://p:1", ("http://p:1", None)),
        ("http://p:1 8998", ("http://p:1", 8998)),
        ("http://p:1 none", ("http://p:1", None)),
        ("http://p:1 NONE", ("http://p:1", None)),
    ],
)
def test_parse_prefill(entry: str, expected: tuple[str, int | None]) -> None:
    assert pd.parse_prefill(entry) == expected


@pytest.mark.parametrize("entry", ["", "http://p:1 x", "http://p:1 0", "http://p:1 70000", "a 1 2"])
def test_parse_prefill_rejects(entry: str) -> None:
    with pytest.raises(ValueError):
        pd.parse_prefill(entry)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://10.0.0.5:30000", "10.0.0.5"),
        ("https://prefill.local", "prefill.local"),
        ("http://[::1]:8000", "::1"),
        ("grpc://h:1", "h"),
    ],
)
def test_bootstrap_host(url: str, host: str) -> None:
    assert pd.bootstrap_host(url) == host


def test_select_pair_uses_roles_only() -> None:
    workers = [
        w("http://r", "regular"),
        w("http://p1", "prefill", port=1),
        w("http://d1", "decode"),
        w("http://p2", "prefill", port=2),
        w("http://d2", "decode"),
    ]
    pre, dec = RoundRobinPolicy(), RoundRobinPolicy()
    pairs = [
        pd.select_pair(workers, ROUTE, prefill_policy=pre, decode_policy=dec, now=0.0)
        for _ in range(4)
    ]
    assert {p.prefill.url for p in pairs} == {"http://p1", "http://p2"}
    assert {p.decode.url for p in pairs} == {"http://d1", "http://d2"}
    assert all(p.prefill.worker_type == "prefill" for p in pairs)


@pytest.mark.parametrize(
    ("workers", "code"),
    [
        ([w("http://d", "decode"), w("http://r", "regular")], "no_prefill_worker"),
        ([w("http://p", "prefill")], "no_decode_worker"),
        (
            [w("http://p", "prefill", health=HealthStatus.NOT_READY), w("http://d", "decode")],
            "no_prefill_worker",
        ),
        (
            [w("http://p", "prefill"), w("http://d", "decode", breaker=BreakerState.OPEN)],
            "no_decode_worker",
        ),
    ],
)
def test_select_pair_missing_role(workers: list[WorkerSnapshot], code: str) -> None:
    pol = RoundRobinPolicy()
    with pytest.raises(ApiError) as info:
        pd.select_pair(workers, ROUTE, prefill_policy=pol, decode_policy=pol, now=0.0)
    assert info.value.status == 503 and info.value.code == code


def test_inject_bootstrap_single() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 4}
    out = pd.inject_bootstrap(body, w("http://10.1.2.3:30000", "prefill", port=8998), 42)
    assert out == body | {
        "bootstrap_host": "10.1.2.3",
        "bootstrap_port": 8998,
        "bootstrap_room": 42,
    }
    assert "bootstrap_room" not in body  # the caller's body is not changed


def test_inject_bootstrap_no_port_is_null() -> None:
    out = pd.inject_bootstrap({"prompt": "x"}, w("http://h:1", "prefill"), 7)
    assert out["bootstrap_port"] is None and out["bootstrap_host"] == "h"


def test_inject_bootstrap_batch_gets_one_room_per_prompt() -> None:
    top = (1 << 63) - 1
    out = pd.inject_bootstrap({"text": ["a", "b", "c"]}, w("http://h:1", "prefill", port=9), top)
    assert out["bootstrap_host"] == ["h"] * 3
    assert out["bootstrap_port"] == [9] * 3
    assert out["bootstrap_room"] == [top, 0, 1]
    ids = pd.inject_bootstrap({"input_ids": [[1], [2]]}, w("http://h:1", "prefill"), 5)
    assert ids["bootstrap_room"] == [5, 6]
    single_ids = pd.inject_bootstrap({"input_ids": [1, 2]}, w("http://h:1", "prefill"), 5)
    assert single_ids["bootstrap_room"] == 5


def test_new_room_is_63_bit() -> None:
    rng = random.Random(1)
    rooms = {pd.new_room(rng) for _ in range(1000)}
    assert len(rooms) == 1000 and all(0 <= r < 2**63 for r in rooms)


def test_readiness_names_the_missing_pd_role() -> None:
    p, d = w("http://p", "prefill"), w("http://d", "decode")
    sick = w("http://d2", "decode", health=HealthStatus.NOT_READY)
    assert missing_role([p, d]) is None
    assert missing_role([d]) == "prefill"
    assert missing_role([p, sick, w("http://r", "regular")]) == "decode"
    assert missing_role([]) == "prefill"


def test_cli_pd_flags_make_typed_workers() -> None:
    _, ns = cli.parse(
        [
            "--pd-disaggregation",
            "--prefill", "http://p1:30001", "8998",
            "--prefill", "http://p2:30002", "none",
            "--prefill", "http://p3:30003",
            "--decode", "http://d1:30011",
            "--prefill-policy", "random",
            "--decode-policy", "power_of_two",
        ]
    )  # fmt: skip
    cfg = cli.gateway_config_from(ns)
    assert cfg.pd.pd_disaggregation
    assert cfg.pd.prefill == ("http://p1:30001 8998", "http://p2:30002 none", "http://p3:30003")
    assert cfg.pd.decode == ("http://d1:30011",)
    assert (cfg.pd.prefill_policy, cfg.pd.decode_policy) == ("random", "power_of_two")
    msgs = startup_workers(cfg)
    assert [(m.url, m.worker_type, m.bootstrap_port) for m in msgs] == [
        ("http://p1:30001", "prefill", 8998),
        ("http://p2:30002", "prefill", None),
        ("http://p3:30003", "prefill", None),
        ("http://d1:30011", "decode", None),
    ]


def test_cli_pd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMG_PREFILL", "http://p:1 9000,http://q:2")
    _, ns = cli.parse([])
    assert cli.gateway_config_from(ns).pd.prefill == ("http://p:1 9000", "http://q:2")


def test_cli_pd_defaults_off() -> None:
    _, ns = cli.parse([])
    cfg = cli.gateway_config_from(ns)
    assert not cfg.pd.pd_disaggregation and cfg.pd.prefill == () and cfg.pd.decode == ()
    assert cfg.pd.prefill_policy is None


# --- HttpPd against a scripted backend (no sockets) --------------------------------------------


class FakeContent:
    def __init__(self, chunks: list[bytes], hang: bool) -> None:
        self.chunks = chunks
        self.hang = hang

    async def readany(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.hang:
            await asyncio.Event().wait()
        return b""

    async def read(self, n: int = -1) -> bytes:
        return b"".join(self.chunks)


class FakeResp:
    def __init__(self, status: int, body: bytes, *, hang: bool = False) -> None:
        self.status = status
        self.body = body
        self.headers = {"Content-Type": "application/json"}
        self.content = FakeContent([body], hang)
        self.content_length: int | None = None
        self.closed = False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeBackend(HttpBackend):
    """The real backend's header and body handling; `open` answers from a script."""

    def __init__(self, script: dict[str, Any]) -> None:
        super().__init__(None, 5.0, worker_api_key="wk")  # type: ignore[arg-type]
        self.script = script
        self.bodies: dict[str, dict[str, Any]] = {}
        self.headers: dict[str, dict[str, str]] = {}

    async def open(  # type: ignore[override]
        self, worker: WorkerSnapshot, path: str, body: bytes, headers: Any, timeout_s: Any = None
    ) -> Any:
        self.bodies[worker.url] = orjson.loads(body)
        self.headers[worker.url] = dict(headers)
        outcome = self.script[worker.url]
        if isinstance(outcome, UpstreamError):
            raise outcome
        if outcome == "hang":
            await asyncio.Event().wait()
        return outcome


class FixedClock:
    def now(self) -> float:
        return 0.0


def _serve(
    script: dict[str, Any], render_with: RenderFactory = openai_renderer
) -> tuple[Any, FakeBackend, list[WorkerSnapshot]]:
    workers = [w("http://p:1", "prefill", port=8998), w("http://d:2", "decode")]
    backend = FakeBackend(script)
    pairing = Pairing(
        RoundRobinPolicy(),
        RoundRobinPolicy(),
        FixedClock(),  # type: ignore[arg-type]
        RecordingMetrics(),
    )
    routes = HttpPd(backend=backend, pairing=pairing, rng=random.Random(3))
    client_headers = {"X-Test": "1", "X-Request-Id": "r1", "Authorization": "Bearer client-key"}
    request = make_mocked_request("POST", "/v1/completions", headers=client_headers)
    body = {"model": "m", "prompt": "hi", "rid": "client-rid"}
    req = Request(
        Kind.COMPLETION,
        "m",
        body,
        orjson.dumps(body),
        "/v1/completions",
        False,
        None,
        request.headers,
        None,
        "r1",
        "cmpl-gw-1",
        None,
    )

    async def run() -> Any:
        return await asyncio.wait_for(
            routes.serve(request, req, ROUTE, tuple(workers), render_with), 5.0
        )

    return run, backend, workers


def test_pd_routes_relays_decode_and_shares_the_room() -> None:
    run, backend, workers = _serve(
        {"http://p:1": FakeResp(200, b'{"p":1}'), "http://d:2": FakeResp(200, b'{"d":1}')}
    )
    resp = asyncio.run(run())
    assert resp.status == 200 and resp.body == b'{"d":1}'
    # worker ids, not URLs (finding 8); the client's id echoed
    assert resp.headers["X-SMG-Routed-Worker-Id"] == "id-2"
    assert resp.headers["X-SMG-Prefill-Worker-Id"] == "id-1"
    assert resp.headers["X-Request-Id"] == "r1"
    p, d = backend.bodies["http://p:1"], backend.bodies["http://d:2"]
    assert p == d and p["bootstrap_host"] == "p" and p["bootstrap_port"] == 8998
    assert p["rid"] == "cmpl-gw-1"  # finding 9: the engine id is the gateway's
    for sent in backend.headers.values():  # finding 6: the worker's credential, not the client's
        assert sent["X-Request-Id"] == "cmpl-gw-1" and sent["Authorization"] == "Bearer wk"
        assert "client-key" not in str(sent)
    assert all(x.counter.active == 0 and x.counter.processed == 1 for x in workers)


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ({"http://p:1": UpstreamError("connect", "refused"), "http://d:2": "hang"}, "prefill"),
        ({"http://p:1": FakeResp(500, b"boom"), "http://d:2": "hang"}, "prefill"),
        ({"http://p:1": "hang", "http://d:2": UpstreamError("connect", "refused")}, "decode"),
        ({"http://p:1": "hang", "http://d:2": FakeResp(503, b"busy")}, "decode"),
        (
            {"http://p:1": FakeResp(200, b"x", hang=True), "http://d:2": FakeResp(400, b"bad")},
            "decode",
        ),
    ],
)
def test_pd_routes_a_failed_leg_cancels_the_other(script: dict[str, Any], code: str) -> None:
    run, _, workers = _serve(script)
    with pytest.raises(ApiError) as info:
        asyncio.run(run())
    assert info.value.status == 502 and info.value.code == f"pd_{code}_failed"
    assert "http://" not in info.value.message and "refused" not in info.value.message
    assert all(x.counter.active == 0 for x in workers)


CHAT = {
    "choices": [{"index": 0, "message": {"content": "Hi there."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


def _responses() -> ResponsesRenderer:
    return ResponsesRenderer(parse_responses({"model": "m", "input": "hi"}), "resp_pd")


def test_pd_routes_render_the_decodes_chat_answer_for_responses() -> None:
    """A surface the gateway renders (Responses): the decode's chat answer is read back and
    rendered, not relayed; both legs settle as successes."""
    script = {
        "http://p:1": FakeResp(200, b'{"p":1}'),
        "http://d:2": FakeResp(200, orjson.dumps(CHAT)),
    }
    run, _, workers = _serve(script, _responses())
    resp = asyncio.run(run())
    body = orjson.loads(resp.body)
    assert body["id"] == "resp_pd" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "Hi there."
    assert body["usage"]["input_tokens"] == 5 and body["usage"]["output_tokens"] == 2
    assert resp.headers["X-SMG-Routed-Worker-Id"] == "id-2"
    assert resp.headers["X-SMG-Prefill-Worker-Id"] == "id-1"
    assert all(x.counter.active == 0 and x.counter.processed == 1 for x in workers)


def test_pd_routes_a_decode_answer_that_is_not_chat_is_a_502_and_cancels_prefill() -> None:
    script = {"http://p:1": FakeResp(200, b"x", hang=True), "http://d:2": FakeResp(200, b"{oops")}
    run, _, workers = _serve(script, _responses())
    with pytest.raises(ApiError) as info:
        asyncio.run(run())
    assert info.value.status == 502 and info.value.code == "upstream_bad_answer"
    assert all(x.counter.active == 0 for x in workers)


@pytest.mark.parametrize(
    ("args", "port"),
    [
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998.0}, 8998),
        ({"disaggregation_bootstrap_port": 8998}, 8998),  # no mode given: taken as prefill
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": "9001"}, 9001),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 0.0}, None),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 70000}, None),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998.5}, None),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": None}, None),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": True}, None),
        ({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": "x"}, None),
        ({"disaggregation_mode": "decode", "disaggregation_bootstrap_port": 8998}, None),
        ({"disaggregation_mode": "null", "disaggregation_bootstrap_port": 8998}, None),
        ({}, None),
    ],
)
def test_bootstrap_port_from_server_args(args: dict[str, Any], port: int | None) -> None:
    assert pd.bootstrap_port_from(args) == port
