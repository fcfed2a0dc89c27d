"""Which worker URLs the gateway may talk to: a pure policy over URLs and IP addresses.

A worker URL is `http`, `https`, `grpc` or `grpcs` with a host (gRPC ones with a port too), no
credentials in it, no query or fragment. Where it may point is an address policy:

* denied always: link-local (169.254.0.0/16, fe80::/10), cloud metadata addresses (AWS, GCP,
  Azure: 169.254.169.254; ECS: 169.254.170.2; AWS IPv6: fd00:ec2::254; Alibaba: 100.100.100.200;
  Oracle: 192.0.0.192), "this network" 0.0.0.0/8, the unspecified `::`, multicast, broadcast
  and the reserved 240.0.0.0/4; the host names of metadata services (`metadata.google.internal`
  and kin) whatever they resolve to; plus the operator's `--worker-url-denylist` CIDRs;
* allowed otherwise, loopback and private ranges included (engines live there), unless an
  `--worker-url-allowlist` is given: then only addresses inside one of its CIDRs.

A denial always wins over the allowlist. IPv6 forms that embed an IPv4 address (IPv4-mapped
`::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by that address too, so
`::ffff:169.254.169.254` is the metadata address. This module resolves nothing: the shell
(`smg.pipeline.backends.address_guard`) resolves host names and judges every address here, at
registration and again at every connect (DNS may change its answer in between).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = {"http": 80, "https": 443, "grpc": None, "grpcs": None}

# (network, why it is denied), checked in order: the specific metadata addresses first, so the
# reason names them rather than the range around them.
DEFAULT_DENY: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "a cloud metadata address"),
    ("169.254.170.2/32", "a cloud metadata address (ECS task credentials)"),
    ("100.100.100.200/32", "a cloud metadata address (Alibaba)"),
    ("192.0.0.192/32", "a cloud metadata address (Oracle)"),
    ("fd00:ec2::254/128", "a cloud metadata address (AWS IPv6)"),
    ("169.254.0.0/16", "link-local"),
    ("fe80::/10", "link-local"),
    ("0.0.0.0/8", "in 'this network' (0.0.0.0/8)"),
    ("::/128", "the unspecified address"),
    ("224.0.0.0/4", "multicast"),
    ("ff00::/8", "multicast"),
    ("240.0.0.0/4", "reserved or broadcast"),
)
# Names of metadata services, denied whatever they resolve to (GCE answers `metadata` too).
DENIED_NAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
    }
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class InvalidWorkerUrl(ValueError):
    """The URL is malformed (the message says how)."""


class DeniedWorkerUrl(InvalidWorkerUrl):
    """The URL points where workers may not be (the message says why)."""


@dataclass(frozen=True, slots=True)
class WorkerUrl:
    scheme: str
    host: str  # lower case, IPv6 without brackets, no trailing dot
    port: int

    @property
    def address(self) -> IPAddress | None:
        """The host as an IP address when it is a literal one."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def parse_worker_url(url: str) -> WorkerUrl:
    """Split and check the shape of a worker URL; raises `InvalidWorkerUrl`."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidWorkerUrl("the worker URL is empty")
    try:
        parts: SplitResult = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InvalidWorkerUrl(f"the worker URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidWorkerUrl("the URL must start with http://, https://, grpc:// or grpcs://")
    if parts.username is not None or parts.password is not None:
        raise InvalidWorkerUrl("credentials do not belong in a worker URL: give an api_key")
    if parts.query or parts.fragment:
        raise InvalidWorkerUrl("a worker URL has no query or fragment")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise InvalidWorkerUrl("the worker URL has no host")
    if port is None:
        port = SCHEMES[scheme]
        if port is None:
            raise InvalidWorkerUrl(f"a {scheme}:// worker URL needs a port (host:port)")
    if port == 0:
        raise InvalidWorkerUrl("port 0 is not a worker's port")
    if scheme.startswith("grpc") and parts.path.strip("/"):
        raise InvalidWorkerUrl(f"a {scheme}:// worker URL has no path")
    return WorkerUrl(scheme, host, port)


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _networks(cidrs: Iterable[str], flag: str) -> tuple[Network, ...]:
    out = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{flag}: {cidr!r} is not an IP network (CIDR)") from None
    return tuple(out)


class AddressPolicy:
    """Where workers may be: `denied(ip)` says why an address is refused, or None."""

    __slots__ = ("allow", "deny")

    def __init__(self, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> None:
        """`allow`/`deny`: CIDR strings (`--worker-url-allowlist`, `--worker-url-denylist`);
        a malformed one raises ValueError naming the flag."""
        self.allow = _networks(allow, "--worker-url-allowlist")
        extra = _networks(deny, "--worker-url-denylist")
        self.deny: tuple[tuple[Network, str], ...] = (
            *((ipaddress.ip_network(n), why) for n, why in DEFAULT_DENY),
            *((n, "in --worker-url-denylist") for n in extra),
        )

    def denied(self, address: str | IPAddress) -> str | None:
        """Why `address` may not be a worker's, or None when it may. Anything that is not an IP
        address is refused (the caller resolves names first)."""
        try:
            ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        except ValueError:
            return "not an IP address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).partition("%")[0])
        inner = _embedded_v4(ip)
        for candidate in (ip,) if inner is None else (ip, inner):
            for net, why in self.deny:
                if candidate.version == net.version and candidate in net:
                    return f"{candidate} is {why}"
        if self.allow and not any(
            c.version == n.version and c in n
            for c in ((ip,) if inner is None else (ip, inner))
            for n in self.allow
        ):
            return f"{ip} is outside --worker-url-allowlist"
        return None

    @staticmethod
    def name_denied(host: str) -> str | None:
        """Why a host name may not be a worker's (metadata services), or None."""
        if host.lower().rstrip(".") in DENIED_NAMES:
            return f"{host} names a cloud metadata service"
        return None

    def check(self, url: str) -> WorkerUrl:
        """Everything decidable without DNS: the URL's shape, a denied name, a denied literal
        address. Raises `InvalidWorkerUrl` (`DeniedWorkerUrl` for a denial); a host name still
        has to be resolved and checked."""
        parsed = parse_worker_url(url)
        why = self.name_denied(parsed.host)
        if why is None and parsed.address is not None:
            why = self.denied(parsed.address)
        if why is not None:
            raise DeniedWorkerUrl(f"workers may not be at this address: {why}")
        return parsed
