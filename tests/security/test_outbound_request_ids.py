"""Finding 9: the engine's request id is the gateway's, never the client's.

Before the fix a client's `X-Request-Id` became the engine's request id. An engine keys its work
by that id: a second client reusing the first one's id shared its identity, and when either left
the gateway's Abort for that id ended both streams (so any user could abort another's stream by
sending its id). Now engines and workers always see an id the gateway made; the client's id is
only echoed back in `X-Request-Id`.
"""

from __future__ import annotations

import re
import threading

from integration.conftest import Launcher, wait_until

from .clients import leave_midway
from .hostile import hostile_worker

MESSAGES = [{"role": "user", "content": "whose id is it"}]
SHARED = "shared-request-id-42"


def test_grpc_two_clients_with_one_id_do_not_abort_each_other(launch: Launcher) -> None:
    engine = launch.engine("m", decode_ms_per_token=25)  # 120 tokens: a 3 s stream
    gw = launch.gateway([engine])
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 120, "stream": True}
    client = gw.client(timeout_s=30.0)
    result: dict[str, object] = {}

    def victim() -> None:
        raw = client.chat.completions.with_raw_response.create(
            **body, extra_headers={"X-Request-Id": SHARED}
        )
        result["header"] = raw.headers.get("x-request-id")
        chunks = list(raw.parse())
        result["finish"] = chunks[-1].choices[0].finish_reason if chunks else None
        result["ids"] = {c.id for c in chunks}

    t = threading.Thread(target=victim)
    t.start()
    wait_until(lambda: engine.stats()["in_flight"] >= 1, 10.0, "the victim's stream running")
    # the attacker reuses the victim's id and leaves mid-stream: the gateway aborts its call
    got = leave_midway(gw.port, "/v1/chat/completions", body, headers={"X-Request-Id": SHARED})
    assert f"X-Request-Id: {SHARED}".encode() in got  # the client's id is echoed
    t.join(30.0)
    assert not t.is_alive()
    assert result["finish"] == "length", result  # the victim's stream ran to its end
    assert result["header"] == SHARED
    ids = result["ids"]
    assert isinstance(ids, set) and len(ids) == 1 and SHARED not in ids  # the body id is ours
    wait_until(lambda: engine.stats()["in_flight"] == 0, 10.0, "both calls over")
    stats = engine.stats()
    assert stats["completed"] >= 1
    # the engine never heard the client's id: the Abort named the gateway's id for the attacker
    log = engine.proc.log_path.read_text()
    assert SHARED not in log, [ln for ln in log.splitlines() if SHARED in ln][:3]


def test_http_workers_get_a_fresh_gateway_id_every_time(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway([worker.url])
        echoed = []
        for _ in range(3):
            r = gw.request(
                "POST",
                "/v1/chat/completions",
                {"model": "m", "messages": MESSAGES, "rid": SHARED, "request_id": SHARED},
                headers={"X-Request-Id": SHARED, "X-Correlation-Id": SHARED},
            )
            assert r.status == 200, r.body
            echoed.append(r.header("X-Request-Id"))
        r = gw.request("POST", "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
        own = r.header("X-Request-Id")  # no client id: the gateway's own, also the engine's
        assert echoed == [SHARED] * 3
        seen = worker.data_requests()
        sent_ids = [s.header("X-Request-Id") for s in seen]
        assert len(set(sent_ids)) == 4 and SHARED not in sent_ids, sent_ids
        assert sent_ids[-1] == own
        assert all(re.fullmatch(r"chatcmpl-[0-9a-f]+-[0-9a-f]+", i or "") for i in sent_ids)
        for s in seen[:3]:
            assert SHARED not in str(s.headers) and SHARED.encode() not in s.body
            assert s.json()["rid"] == s.header("X-Request-Id") == s.json()["request_id"]


def test_native_generate_replaces_the_clients_rid(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway([worker.url])
        for rid in (SHARED, [SHARED, SHARED]):
            r = gw.request(
                "POST",
                "/generate",
                {"model": "m", "text": "hello", "rid": rid},
                headers={"X-Request-Id": SHARED},
            )
            assert r.status == 200 and r.header("X-Request-Id") == SHARED, r.body
        single, batch = worker.data_requests()
        engine_id = single.header("X-Request-Id")
        assert engine_id and engine_id != SHARED and single.json()["rid"] == engine_id
        batch_id = batch.header("X-Request-Id")
        assert batch.json()["rid"] == [f"{batch_id}-0", f"{batch_id}-1"]
