"""Mesh configuration: one frozen dataclass, profiles modelled on memberlist's; is_loopback."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Literal

ProfileName = Literal["lan", "local", "test"]


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104 (also bracketed or with a zone); "localhost".
    Anything else, 0.0.0.0 and :: included, is beyond loopback."""
    host = host.strip("[]").partition("%")[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


@dataclass(frozen=True, slots=True)
class MeshConfig:
    # Time between failure-detection probes; one member probed per interval.
    probe_interval_s: float = 1.0
    # Wait this long for a direct ack before asking helpers (should exceed the RTT p99).
    probe_timeout_s: float = 0.5
    # Helpers asked to probe indirectly (SWIM's k).
    indirect_checks: int = 3
    # Suspicion timeout floor = mult * log10(n) * probe interval (scales with cluster size).
    suspicion_mult: int = 4
    # Suspicion ceiling = this * floor, used while no independent confirmations arrived.
    suspicion_max_timeout_mult: int = 6
    # Each update is retransmitted mult * ceil(log10(n + 1)) times.
    retransmit_mult: int = 4
    # Period of the piggyback-only gossip round.
    gossip_interval_s: float = 0.2
    # Random members sent a gossip packet each gossip round.
    gossip_nodes: int = 3
    # Keep gossiping to a node this long after it is declared dead, so it can refute.
    gossip_to_the_dead_s: float = 30.0
    # Lifeguard local health: probe interval/timeout scale up to this factor.
    awareness_max_multiplier: int = 8
    # Byte budget for one packet (a safe UDP payload under a 1500 MTU).
    max_packet_bytes: int = 1400
    # Full-state TCP exchange with one random live member (anti-entropy: repairs what gossip
    # missed); stretched like memberlist's pushPullScale once the cluster passes 32 members.
    push_pull_interval_s: float = 30.0
    # Push-pull to a random DEAD member this often (cluster-wide ~once per dead member, as
    # serf does), so the two sides of a healed partition find each other again.
    reconnect_interval_s: float = 10.0
    # DEAD and LEFT members are forgotten (and no longer reconnected to) after this long.
    dead_reclaim_s: float = 3600.0

    @classmethod
    def lan(cls) -> MeshConfig:
        """memberlist's DefaultLANConfig."""
        return cls()

    @classmethod
    def local(cls) -> MeshConfig:
        """memberlist's DefaultLocalConfig: loopback, tight timeouts."""
        return replace(
            cls(),
            probe_timeout_s=0.2,
            indirect_checks=1,
            suspicion_mult=3,
            retransmit_mult=2,
            gossip_interval_s=0.1,
            gossip_to_the_dead_s=15.0,
            push_pull_interval_s=15.0,
            reconnect_interval_s=5.0,
            dead_reclaim_s=600.0,
        )

    @classmethod
    def test(cls) -> MeshConfig:
        """Fast settings for simulated and loopback tests."""
        return replace(
            cls(),
            probe_interval_s=0.2,
            probe_timeout_s=0.1,
            suspicion_mult=3,
            retransmit_mult=2,
            gossip_interval_s=0.05,
            gossip_to_the_dead_s=6.0,
            push_pull_interval_s=2.0,
            reconnect_interval_s=1.0,
            dead_reclaim_s=60.0,
        )

    @classmethod
    def profile(cls, name: ProfileName | str) -> MeshConfig:
        """The named profile: "lan", "local" or "test"."""
        match name:
            case "lan":
                return cls.lan()
            case "local":
                return cls.local()
            case "test":
                return cls.test()
        raise ValueError(f"unknown mesh profile {name!r}; expected lan, local or test")
