"""Finding 6 (credentials): a worker gets its own credential, never the clients' key.

Before the fix the gateway sent its own `--api-key` (the key clients present) as the Bearer token
to every worker named on the command line or registered without an `api_key`: registering an
attacker's URL handed it the key. Now a worker gets its own `api_key` (POST /workers) or
`--worker-api-key`, on requests, health checks and load polls alike; without either, nothing.
"""

from __future__ import annotations

from integration.conftest import Launcher, wait_until

from .hostile import HostileWorker, hostile_worker

CLIENT_KEY = "client-secret-key"
WORKER_KEY = "worker-secret-key"
MESSAGES = [{"role": "user", "content": "credentials"}]


def _auths(worker: HostileWorker) -> set[str | None]:
    return {s.header("Authorization") for s in worker.all_seen()}


def _chat_and_stream(client: object) -> None:
    out = client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[attr-defined]
    assert out.choices[0].message.content == "hello"
    chunks = list(
        client.chat.completions.create(  # type: ignore[attr-defined]
            model="m", messages=MESSAGES, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "first last"


def test_command_line_workers_get_the_worker_key_not_the_clients(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway(
            [worker.url],
            api_key=CLIENT_KEY,
            worker_api_key=WORKER_KEY,
            load_monitor_interval=0.5,
        )
        _chat_and_stream(gw.client())
        wait_until(
            lambda: any(s.path == "/get_load" for s in worker.all_seen()), 5.0, "a load poll"
        )
        # requests, health checks and load polls alike carry the worker's credential, and only that
        assert _auths(worker) == {f"Bearer {WORKER_KEY}"}
        assert all(CLIENT_KEY not in str(s.headers) for s in worker.all_seen())


def test_without_a_worker_key_workers_get_no_credential_at_all(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway([worker.url], api_key=CLIENT_KEY)
        _chat_and_stream(gw.client())
        assert _auths(worker) == {None}


def test_a_registered_worker_gets_its_own_key_others_the_default(launch: Launcher) -> None:
    with hostile_worker("m") as own, hostile_worker("m") as plain:
        gw = launch.gateway([], ready=0, worker_api_key=WORKER_KEY)
        r = gw.request("POST", "/workers", {"url": own.url, "api_key": "its-own-key"})
        assert r.status == 202, r.body
        assert gw.request("POST", "/workers", {"url": plain.url}).status == 202
        gw.wait_ready(2)
        client = gw.client()
        for _ in range(4):  # round robin: both get some
            assert client.chat.completions.create(model="m", messages=MESSAGES).choices
        assert own.data_requests() and plain.data_requests()
        assert _auths(own) == {"Bearer its-own-key"}
        assert _auths(plain) == {f"Bearer {WORKER_KEY}"}
        # the key never shows on the admin plane
        assert "its-own-key" not in gw.request("GET", "/workers").body.decode()


def test_a_malformed_api_key_is_refused(launch: Launcher) -> None:
    gw = launch.gateway([], ready=0)
    r = gw.request("POST", "/workers", {"url": "http://127.0.0.1:9", "api_key": 5})
    assert r.status == 400 and r.json()["code"] == "BAD_REQUEST", r.body
