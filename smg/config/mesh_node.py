"""The mesh node's section: SWIM membership and replicated state (`smg node --join`)."""

from __future__ import annotations

from dataclasses import dataclass

from smg.config.knobs import knob


@dataclass(frozen=True, slots=True)
class MeshNodeConfig:
    """The gateway mesh: SWIM membership + replicated state (`smg node --join`)."""

    enable_mesh: bool = knob(False, "Join a gateway mesh (`smg node` turns this on).")
    mesh_server_name: str | None = knob(
        None, "This node's name in the mesh (default: the host name and mesh port)."
    )
    mesh_host: str = knob("0.0.0.0", "Address the mesh listener (UDP + TCP) binds.")
    mesh_advertise_host: str | None = knob(
        None, "Address peers reach this node at; required when --mesh-host is 0.0.0.0."
    )
    mesh_port: int = knob(39527, "Mesh port (UDP gossip and TCP state sync share it).")
    mesh_peer_urls: tuple[str, ...] = knob(
        (), "Peers to join (host:port; repeatable).", aliases=("--join",), nargs="extend"
    )
    cluster_key: str | None = knob(
        None,
        "Primary mesh key (16+ characters, no blanks or commas): every mesh packet and frame is "
        "encrypted with it (AES-256-GCM). Required unless --mesh-host is loopback.",
    )
    cluster_key_secondary: tuple[str, ...] = knob(
        (),
        "More mesh keys, tried to decrypt but never to encrypt: for rotating --cluster-key "
        "without splitting the cluster (repeat the flag, or list them comma-separated).",
        nargs="append+",
    )
    mesh_insecure: bool = knob(
        False,
        "Run a mesh beyond loopback without --cluster-key: plaintext and unauthenticated, "
        "anyone who reaches the port joins. Logs a warning every minute. Never in production.",
    )
    mesh_profile: str = knob(
        "lan", "Failure-detector timing profile.", choices=("lan", "local", "test")
    )
    mesh_fault_injection: bool = knob(
        False, "Expose POST /mesh/faults (drop/delay/partition) for chaos tests. Never in prod."
    )


def seed_addrs(cfg: MeshNodeConfig) -> list[str]:
    """The peers to join as host:port (a peer named without a port: at --mesh-port)."""
    out: list[str] = []
    for entry in cfg.mesh_peer_urls:
        for part in entry.replace(",", " ").split():
            part = part.removeprefix("http://").removeprefix("tcp://").rstrip("/")
            if ":" not in part:
                part = f"{part}:{cfg.mesh_port}"
            out.append(part)
    return out
