"""`--workers N`: how many gateway processes, and what each child is told (pure).

The parent (smg/app/processes.py) runs N children, each a whole `smg launch --workers 1`
gateway: they listen on the same port with SO_REUSEPORT (the kernel spreads connections by
their 4-tuple) and form a private mesh on loopback, so the workers table, admin changes,
rate-limit counts and cache summaries are replicated between them exactly as between gateways
on different hosts. The cluster key of that mesh is random per boot and reaches the children
only through their environment.

Some state is not replicated by the mesh: stored responses and conversations of the `memory`
backend live in one process. With it, `--workers 0` (the default: the number of cores) runs one
process and says why; an explicit `--workers N > 1` is refused.

In a cluster mesh of the user's (`smg node`, `--enable-mesh`, `--mesh-peer-urls`) there is no
private mesh: every child is a member of the user's cluster in its own right, on its own mesh
port (`--mesh-port` + its index: N consecutive ports), named `<--mesh-server-name>-<index>`
when the user named the node, seeded with the user's peers and its siblings, under the user's
cluster key. What the mesh shares between hosts it then shares between the processes too.

TLS on the listener is served by every child (each loads the certificate); the parent serves
the one public /metrics with it too, and scrapes its children's private metrics listeners on
127.0.0.1 in plain HTTP (loopback only, the scraper's credential passed on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from smg.config import ConfigError, GatewayConfig
from smg.config.mesh_node import MeshNodeConfig, seed_addrs

MAX_PROCESSES = 64
SLOT_ENV = "SMG_PROCESS_SLOT"  # "i/N": this child's index and the count (set by the parent)
PARENT_ENV = "SMG_PROCESS_PARENT"  # the parent's pid: a child whose parent is gone stops
KEY_ENV = "SMG_CLUSTER_KEY"  # the private mesh's per-boot key (read as --cluster-key)
# the user's own mesh settings must not reach the children's private mesh
DROPPED_ENV = ("SMG_CLUSTER_KEY_SECONDARY", "SMG_MESH_PEER_URLS", "SMG_WORKERS")


@dataclass(frozen=True, slots=True)
class Plan:
    count: int
    reason: str  # why this count (logged at start)


def single_process_reasons(cfg: GatewayConfig, command: str) -> list[str]:
    """What in `cfg` keeps state that N processes could not share."""
    reasons = []
    if cfg.storage.history_backend == "memory":
        reasons.append(
            "--history-backend memory keeps responses and conversations in one process "
            "(use none, sqlite, postgres or redis)"
        )
    return reasons


def in_cluster(cfg: GatewayConfig, command: str) -> bool:
    """The user runs a cluster mesh: the children join it (not a private one)."""
    return command == "node" or cfg.mesh.enable_mesh or bool(cfg.mesh.mesh_peer_urls)


def plan(cfg: GatewayConfig, command: str, cpus: int | None) -> Plan:
    asked = cfg.server.workers
    if asked < 0 or asked > MAX_PROCESSES:
        raise ConfigError(f"--workers must be 0 (the number of cores) to {MAX_PROCESSES}")
    if asked == 1:
        return Plan(1, "--workers 1")
    reasons = single_process_reasons(cfg, command)
    if asked == 0:
        if reasons:
            return Plan(1, reasons[0])
        n = min(MAX_PROCESSES, max(1, cpus or 1))
        return _with_mesh_ports(cfg, command, Plan(n, f"{n} cores"))
    if reasons:
        raise ConfigError(f"--workers {asked}: {reasons[0]}; or run --workers 1")
    return _with_mesh_ports(cfg, command, Plan(asked, f"--workers {asked}"))


def _with_mesh_ports(cfg: GatewayConfig, command: str, chosen: Plan) -> Plan:
    """In a cluster the children take `--mesh-port` and the ports after it: they must exist."""
    port = cfg.mesh.mesh_port
    if chosen.count > 1 and in_cluster(cfg, command) and not 0 < port <= 65536 - chosen.count:
        raise ConfigError(
            f"--workers {chosen.count} in a cluster takes {chosen.count} consecutive mesh ports "
            f"from --mesh-port ({port}): set a port with room, or run --workers 1"
        )
    return chosen


def parse_slot(text: str | None) -> tuple[int, int] | None:
    """`SMG_PROCESS_SLOT` ("i/N") as (i, N), or None for a process that is not a child."""
    if not text:
        return None
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        return None
    return (i, n) if 0 <= i < n <= MAX_PROCESSES else None


def launch_args(argv: Sequence[str]) -> list[str]:
    """The user's `smg launch` (or `smg node`) arguments without the command word (a child runs
    `launch`; it is given `--enable-mesh` in either case)."""
    args = list(argv)
    return args[1:] if args and args[0] in ("launch", "node") else args


PEER_FLAGS = ("--mesh-peer-urls", "--join")


def without_options(args: Sequence[str], names: Sequence[str]) -> list[str]:
    """`args` without the options `names` and their values (`--x v1 v2`, `--x=v`): a child in
    the user's cluster gets the user's peers from `cluster_mesh_args`, each with its port, where
    the user's own flags would name a bare host at the child's port."""
    out: list[str] = []
    skipping = False
    for arg in args:
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            skipping = name in names and "=" not in arg
            if name in names:
                continue
        elif skipping:
            continue
        out.append(arg)
    return out


def private_mesh_args(mesh_port: int, peer_mesh_ports: Sequence[int]) -> list[str]:
    """A child's place in the group's private loopback mesh."""
    peers = [f"127.0.0.1:{p}" for p in peer_mesh_ports]
    return [
        "--mesh-host", "127.0.0.1",
        "--mesh-port", str(mesh_port),
        *(["--mesh-peer-urls", *peers] if peers else []),
    ]  # fmt: skip


def cluster_mesh_port(mesh: MeshNodeConfig, index: int) -> int:
    return mesh.mesh_port + index


def cluster_mesh_args(mesh: MeshNodeConfig, index: int, count: int) -> list[str]:
    """Child `index`'s place in the user's cluster: its own port, its own name (when the user
    named the node), seeded with the user's peers and its siblings (reached on loopback when the
    mesh listens on every address)."""
    host = mesh.mesh_host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    siblings = [f"{shown}:{cluster_mesh_port(mesh, j)}" for j in range(count) if j != index]
    seeds = [*seed_addrs(mesh), *siblings]  # the user's with their port (ours differs)
    name = [] if mesh.mesh_server_name is None else [f"{mesh.mesh_server_name}-{index}"]
    return [
        "--mesh-port", str(cluster_mesh_port(mesh, index)),
        *(["--mesh-server-name", *name] if name else []),
        *(["--mesh-peer-urls", *seeds] if seeds else []),
    ]  # fmt: skip


def child_argv(
    user_args: Sequence[str], *, port: int, mesh_args: Sequence[str], metrics_port: int
) -> list[str]:
    """A child's `smg launch` arguments: the user's, then what makes it one of the group (later
    flags win; the user's metrics flags are overridden, and its mesh flags in a private mesh)."""
    return [
        "launch",
        *user_args,
        "--workers", "1",
        "--port", str(port),
        "--enable-mesh",
        *mesh_args,
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(metrics_port),
    ]  # fmt: skip


@dataclass(slots=True)
class Backoff:
    """Restart delays of one child: 0.5 s doubling to `cap_s`; a child that served for
    `reset_after_s` starts again from the first delay."""

    first_s: float = 0.5
    cap_s: float = 30.0
    reset_after_s: float = 60.0
    failures: int = 0

    def next_delay(self, lived_s: float) -> float:
        if lived_s >= self.reset_after_s:
            self.failures = 0
        delay = min(self.cap_s, self.first_s * 2**self.failures)
        self.failures += 1
        return delay
