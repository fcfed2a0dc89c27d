"""The mesh's sockets on loopback: packets and streams arrive decoded, faults and bad keys drop
them (counted), and closing ends the inbound streams."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from smg.actors.mesh_transport import FaultPlan, MeshTransport
from smg.mesh.keyring import Keyring
from smg.mesh.messages import Alive, DocUpdate, Ping

KEY = Keyring("transport-test-key-0001")


class Node:
    def __init__(
        self, host: str, key: Keyring | None = KEY, faults: FaultPlan | None = None
    ) -> None:
        self.packets: list[tuple[str, Any]] = []
        self.streams: list[tuple[str, Any]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.t = MeshTransport(
            host=host,
            port=0,
            advertise_addr="",
            node_id=f"{host}@1",
            keyring=key,
            on_packet=lambda src, m: self.packets.append((src, m)),
            on_stream=lambda src, m: self.streams.append((src, m)),
            rng=random.Random(0),
            faults=faults,
        )

    async def start(self) -> None:
        def spawn(coro: Any, name: str) -> asyncio.Task[Any]:
            task = asyncio.get_running_loop().create_task(coro, name=name)
            self.tasks.append(task)
            return task

        await self.t.start(spawn)
        self.t.advertise_addr = f"{self.t.host}:{self.t.port}"

    @property
    def addr(self) -> str:
        return self.t.advertise_addr

    async def close(self) -> None:
        await self.t.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def until(predicate: Any, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_packets_and_streams_arrive_from_the_senders_address() -> None:
    a, b = Node("127.0.0.61"), Node("127.0.0.62")
    await a.start()
    await b.start()
    try:
        a.t.send(b.addr, Ping(7, "b"))
        a.t.stream(b.addr, DocUpdate("workers", b"\x00\x01"))
        a.t.stream(b.addr, DocUpdate("workers", b"\x02"))
        await until(lambda: b.packets and len(b.streams) == 2)
        assert b.packets == [(a.addr, Ping(7, "b"))]  # UDP: the bound address is the source
        assert b.streams == [  # TCP: the hello names the sender; order is kept
            (a.addr, DocUpdate("workers", b"\x00\x01")),
            (a.addr, DocUpdate("workers", b"\x02")),
        ]
        assert a.t.stats.bytes_out["udp"] > 0 and b.t.stats.bytes_in["tcp"] > 0
    finally:
        await a.close()
        await b.close()


async def test_a_different_cluster_key_is_counted_and_dropped() -> None:
    a, b = (
        Node("127.0.0.63", key=Keyring("key-one-0123456789")),
        Node("127.0.0.64", key=Keyring("key-two-0123456789")),
    )
    await a.start()
    await b.start()
    try:
        a.t.send(b.addr, Alive("a", a.addr, 1))
        a.t.stream(b.addr, DocUpdate("workers", b"x"))
        await until(lambda: b.t.stats.dropped["bad_mac"] >= 2)
        assert b.packets == [] and b.streams == []
    finally:
        await a.close()
        await b.close()


async def test_injected_partition_blocks_both_channels() -> None:
    faults = FaultPlan()
    a, b = Node("127.0.0.65", faults=faults), Node("127.0.0.66")
    await a.start()
    await b.start()
    try:
        faults.blocked = {b.addr}
        a.t.send(b.addr, Ping(1, "b"))
        a.t.stream(b.addr, DocUpdate("workers", b"x"))
        b.t.send(a.addr, Ping(2, "a"))
        await asyncio.sleep(0.2)
        assert b.packets == [] and b.streams == [] and a.packets == []
        faults.blocked = set()  # healed
        a.t.send(b.addr, Ping(3, "b"))
        await until(lambda: b.packets == [(a.addr, Ping(3, "b"))])
    finally:
        await a.close()
        await b.close()


async def test_close_ends_inbound_streams() -> None:
    a, b = Node("127.0.0.67"), Node("127.0.0.68")
    await a.start()
    await b.start()
    a.t.stream(b.addr, DocUpdate("workers", b"x"))
    await until(lambda: b.streams)
    assert len(b.t._inbound) == 1  # the connection stays open for more frames
    await b.close()
    await until(lambda: not b.t._inbound)
    await a.close()


async def test_a_keyless_node_reads_only_loopback_unless_insecure() -> None:
    from smg.actors.mesh_transport import _UdpProtocol
    from smg.mesh.codec import encode_packet

    plain = encode_packet(Ping(1, "b"), None)
    for allow_remote, expected in ((None, []), (True, [("10.0.0.7:4000", Ping(1, "b"))])):
        node = Node("127.0.0.69", key=None)
        node.t.allow_remote = node.t.keyring is not None if allow_remote is None else allow_remote
        _UdpProtocol(node.t).datagram_received(plain, ("10.0.0.7", 4000))
        assert node.packets == expected
        assert node.t.stats.dropped["not_loopback"] == (0 if expected else 1)
    keyless = Node("127.0.0.69", key=None)
    _UdpProtocol(keyless.t).datagram_received(plain, ("127.0.0.2", 4000))
    _UdpProtocol(keyless.t).datagram_received(plain, ("::ffff:127.0.0.2", 4000, 0, 0))
    assert len(keyless.packets) == 2  # loopback peers are read


async def test_port_zero_picks_again_when_the_tcp_half_is_taken(monkeypatch: Any) -> None:
    # --mesh-port 0: the kernel picks the UDP port and TCP must bind the same number, which an
    # outgoing connection may hold (CI saw EADDRINUSE): the transport picks again
    import errno

    from smg.actors import mesh_transport

    real = asyncio.start_server
    refused: list[int] = []

    async def taken_once(*args: Any, **kwargs: Any) -> asyncio.Server:
        if not refused:
            refused.append(args[2])
            raise OSError(errno.EADDRINUSE, "address already in use")
        return await real(*args, **kwargs)

    monkeypatch.setattr(mesh_transport.asyncio, "start_server", taken_once)
    a, b = Node("127.0.0.1"), Node("127.0.0.1")
    await a.start()
    await b.start()
    try:
        assert refused and a.t.port != 0
        a.t.send(b.addr, Ping(7, "b"))
        a.t.stream(b.addr, DocUpdate("workers", b"x"))
        await until(lambda: b.packets and b.streams)
    finally:
        await a.close()
        await b.close()
