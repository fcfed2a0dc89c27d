"""A request-level MCP server's URL (OpenAI's `{"type": "mcp", "server_url": ...}` tool), checked
and classified. Pure: no I/O; where the host may be (the address policy) is the caller's check.

- http:// or https:// with a host, no `user:password@` (credentials go in `headers`), no
  fragment; a query is kept (some servers take a key there), so the URL is never echoed.
- The transport, as the Rust gateway picks it: a path containing `/sse` is the SSE transport,
  anything else streamable HTTP.
- `origin` (`scheme://host:port`) is what an address check is given: host and port are all it
  judges, and the path and query stay out of its messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEMES = {"http": 80, "https": 443}


class InvalidServerUrl(ValueError):
    """A request-level server URL that cannot be used: the client's fault (a 400). The message
    names the server's label and the reason, never the URL or its headers."""


@dataclass(frozen=True, slots=True)
class ServerUrl:
    url: str
    protocol: str  # "sse" | "streamable" (smg.config.mcp.PROTOCOLS)
    origin: str  # scheme://host:port, IPv6 hosts in brackets


def parse_server_url(label: str, url: object) -> ServerUrl:
    if not isinstance(url, str) or not url.strip():
        raise InvalidServerUrl(f"MCP server {label!r}: server_url must be a non-empty string")
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidServerUrl(f"MCP server {label!r}: server_url is malformed") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidServerUrl(f"MCP server {label!r}: server_url must be http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise InvalidServerUrl(
            f"MCP server {label!r}: credentials do not belong in server_url (use headers)"
        )
    if parts.fragment:
        raise InvalidServerUrl(f"MCP server {label!r}: server_url has no fragment")
    host = parts.hostname or ""
    if not host:
        raise InvalidServerUrl(f"MCP server {label!r}: server_url has no host")
    if port == 0:
        raise InvalidServerUrl(f"MCP server {label!r}: server_url has port 0")
    shown = f"[{host}]" if ":" in host else host
    origin = f"{scheme}://{shown}:{port or SCHEMES[scheme]}"
    protocol = "sse" if "/sse" in parts.path else "streamable"
    return ServerUrl(url, protocol, origin)
