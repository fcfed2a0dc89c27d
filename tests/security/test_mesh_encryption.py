"""Finding 4 of issue 10: HMAC authenticated the mesh but nothing was encrypted, so anyone on the
path read worker records (with their keys) and users' prompts.

Two real nodes talk only through recording relays (each node advertises its relay's address), so
the test holds every byte that crossed the "network" in both directions, UDP and TCP."""

from __future__ import annotations

from integration.conftest import Launcher, free_port, wait_until
from integration.test_mesh import all_alive, start_node

from .mesh_peer import RecordingRelay

SECRET = "sk-worker-SECRET-b41d"


def test_nothing_on_the_wire_is_readable(launch: Launcher) -> None:
    pa, pb = free_port(), free_port()
    relay_a = RecordingRelay(f"127.0.0.211:{pa}", f"127.0.0.111:{pa}")
    relay_b = RecordingRelay(f"127.0.0.212:{pb}", f"127.0.0.112:{pb}")
    try:
        a = start_node(launch, "127.0.0.111", [], pa, mesh_advertise_host="127.0.0.211")
        b = start_node(
            launch,
            "127.0.0.112",
            [],
            pb,
            mesh_advertise_host="127.0.0.212",
            mesh_peer_urls=f"127.0.0.211:{pa}",
        )
        wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive through the relays")
        sim = launch.sim("m")
        r = a.gw.request("POST", "/workers", {"url": sim.url, "api_key": SECRET})
        assert r.status == 202, r
        wait_until(lambda: b.gw.worker_by_url(sim.url), 10.0, "B imports A's worker")
        captured = {ch: bytes(relay_a.captured[ch] + relay_b.captured[ch]) for ch in ("udp", "tcp")}
        assert len(captured["udp"]) > 500 and len(captured["tcp"]) > 500, {
            ch: len(v) for ch, v in captured.items()
        }
        wire = captured["udp"] + captured["tcp"]
        readable = [
            sim.url,
            f"127.0.0.1:{sim.port}",
            SECRET,
            "127.0.0.211-",  # node ids (name = advertised host and port)
            f"127.0.0.212:{pb}",  # advertised addresses
            "workers",  # namespace names
        ]
        for text in readable:
            assert text.encode() not in wire, text
    finally:
        relay_a.close()
        relay_b.close()
