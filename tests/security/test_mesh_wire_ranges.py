"""Finding 3 of issue 10: a Suspect carrying incarnation 2^64-1 made the node refute with 2^64,
which the codec could not encode: the node was expelled and /mesh/status answered 500.

A keyed peer in the test process sends a real node extreme numbers in every field that carries
one; the node stays up and a member, its status answers 200, and what it announces still encodes.
"""

from __future__ import annotations

from integration.conftest import Launcher, wait_until
from integration.test_mesh import KEY, all_alive, start_node

from smg.mesh.keyring import Keyring
from smg.mesh.messages import MAX_INCARNATION

from .mesh_peer import MeshPeer

HUGE = [2**64 - 1, 2**64 - 2, 2**63, MAX_INCARNATION + 1]


def test_extreme_incarnations_leave_the_node_up_and_its_status_answering(
    launch: Launcher,
) -> None:
    a = start_node(launch, "127.0.0.101", [])
    b = start_node(launch, "127.0.0.102", [a])
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive")
    a_id = a.status()["node_id"]
    peer = MeshPeer("127.0.0.103", Keyring(KEY), name="mallory@1")
    try:
        for inc in HUGE:
            suspect, dead = [6, a_id, inc, "mallory"], [7, a_id, inc, "mallory"]
            alive, leave = [5, a_id, a.addr, inc], [8, a_id, inc]
            join = [9, peer.node_id, peer.addr, inc]
            for obj in (suspect, dead, alive, leave, join):
                peer.send_raw(a.addr, obj)
            peer.send_raw(a.addr, [10, [suspect, dead]])  # gossip batch
            peer.send_raw(a.addr, [11, [[3, 2**64 - 1], suspect]])  # compound
        # within range: refuted, to the cap and no further
        peer.send_raw(a.addr, [6, a_id, MAX_INCARNATION - 1, "mallory"])
        wait_until(
            lambda: a.status()["incarnation"] == MAX_INCARNATION, 10.0, "A refutes at the cap"
        )
        status = a.status()  # 200, and every number in it is in range
        assert status["dropped"].get("malformed", 0) >= 7 * len(HUGE)
        assert all(0 <= m["incarnation"] <= MAX_INCARNATION for m in status["members"])
        assert a.gw.proc.alive
        # its refutation encoded and reached B: A is alive there at the new incarnation
        wait_until(
            lambda: any(
                m["node_id"] == a_id and m["incarnation"] == MAX_INCARNATION
                for m in b.status()["members"]
            ),
            10.0,
            "B hears A's refutation",
        )
        assert all_alive([a, b], 2)
        assert a.gw.metric("smg_mesh_incarnation") == float(MAX_INCARNATION)  # scrapes fine
    finally:
        peer.close()
