"""The data path keeps its connections to a worker alive (the lean HTTP/1.1 client's pool):
sequential requests, whole and streamed, ride one connection; an answer the client leaves in the
middle of drops its connection (the worker sees the hang-up) and the next request opens another.
"""

from __future__ import annotations

import json
import urllib.request

from integration.conftest import Launcher, wait_until

from .clients import crowd_leaves
from .hostile import hostile_worker

MESSAGES = [{"role": "user", "content": "hi"}]


def test_sequential_requests_ride_one_worker_connection(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway([worker.url])
        client = gw.client(timeout_s=30.0)
        for _ in range(10):
            out = client.chat.completions.create(model="m", messages=MESSAGES)
            assert out.choices[0].message.content == "hello"
        body = json.dumps({"model": "m", "messages": MESSAGES, "stream": True}).encode()
        for _ in range(5):  # read to the end (the SDK may hang up once it sees [DONE]: a leave)
            req = urllib.request.Request(
                f"http://127.0.0.1:{gw.port}/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.read().endswith(b"data: [DONE]\n\n")
        seen = worker.data_requests()
        assert len(seen) == 15
        assert len({s.peer for s in seen}) == 1, str([s.peer[1] for s in seen if s.peer])


def test_a_client_leaving_midstream_drops_that_connection_only(launch: Launcher) -> None:
    with hostile_worker("m", mode="stream_forever") as worker:
        gw = launch.gateway([worker.url])
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        got = crowd_leaves(gw.port, "/v1/chat/completions", body, 4)
        assert all(b"data:" in g for g in got)
        wait_until(lambda: len(worker.data_requests()) == 4, 10.0, "the worker to see 4 streams")
        got = crowd_leaves(gw.port, "/v1/chat/completions", body, 4)
        assert all(b"data:" in g for g in got)
        wait_until(lambda: len(worker.data_requests()) == 8, 10.0, "the worker to see 8 streams")
        # every stream the client left was cut upstream: none of its connections came back
        assert len({s.peer for s in worker.data_requests()}) == 8
