"""The MCP servers file (`--mcp-config-path`): the Rust gateway's YAML layout, parsed into frozen
values. Pure: text in, `McpConfig` out, or one ConfigError line naming the bad key (never a
token or a header value).

Layout (crates/mcp/src/core/config.rs in the Rust gateway):

    servers:
      - name: search                  # unique
        protocol: streamable          # stdio | sse | streamable
        url: http://127.0.0.1:8931/mcp
        token: ...                    # sent as `Authorization: Bearer ...` (sse, streamable)
        headers: {X-Tenant: a}        # sse, streamable
        required: false
      - name: files
        protocol: stdio
        command: python
        args: [-m, my_server]
        envs: {LOG: info}
    pool: {max_connections: 100, idle_timeout: 300}
    inventory: {enable_refresh: true, tool_ttl: 300, refresh_interval: 60, refresh_on_error: true}

String values may name environment variables: `token: ${SEARCH_TOKEN}`, `${VAR:-default}`
(smg/config/env_expand.py); an unset one without a default stops the start, naming it.

smg adds two per-server keys the Rust layout lacks: `connect_timeout_secs` (10, the Rust
gateway's HTTP connect timeout) and `request_timeout_secs` (30: one tool call or listing; past it
the call becomes an error output). Keys the Rust layout has but smg does not serve yet (`proxy`,
`warmup`, `policy`, per-server `tools`, `builtin_type`, ...) are refused by name, not dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from smg.config.env_expand import expand_tree
from smg.config.knobs import ConfigError, knob

PROTOCOLS = ("stdio", "sse", "streamable")
_NOT_YET = ("proxy", "warmup", "policy")
_SERVER_NOT_YET = ("proxy", "tools", "builtin_type", "builtin_tool_name", "internal")
_SERVER_COMMON = ("name", "protocol", "required", "connect_timeout_secs", "request_timeout_secs")
_SERVER_KEYS = {
    "stdio": (*_SERVER_COMMON, "command", "args", "envs"),
    "sse": (*_SERVER_COMMON, "url", "token", "headers"),
    "streamable": (*_SERVER_COMMON, "url", "token", "headers"),
}
MAX_SERVERS = 256
CONNECT_TIMEOUT_S = 10.0  # spawn/connect + MCP initialize handshake (the Rust HTTP connect)
REQUEST_TIMEOUT_S = 30.0  # one tools/list or tools/call


@dataclass(frozen=True, slots=True)
class McpFlagsConfig:
    mcp_config_path: str | None = knob(
        None, "MCP servers file (YAML, the Rust gateway's layout); read and checked at start."
    )
    mcp_max_iterations: int = knob(
        10,
        "Model rounds that may end in MCP tool calls per response (the Rust gateway's loop "
        "limit); past it the response fails with tool_iterations_exceeded.",
    )


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    protocol: str  # one of PROTOCOLS
    command: str | None = None  # stdio: the executable
    args: tuple[str, ...] = ()  # stdio
    envs: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # stdio: may hold secrets
    url: str | None = None  # sse, streamable
    token: str | None = field(default=None, repr=False)  # a secret: never in repr or errors
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    required: bool = False  # the Rust gateway: start fails when a required server is unreachable
    connect_timeout_secs: float = CONNECT_TIMEOUT_S
    request_timeout_secs: float = REQUEST_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class McpPoolConfig:
    # request-level servers (a request's `{"type": "mcp", "server_url": ...}` tool) with a
    # session open at once, pool-wide; past it such a tool fails as unavailable (the Rust gateway
    # keeps an LRU of that many dynamic-server connections; smg keeps none past its request)
    max_connections: int = 100
    idle_timeout_secs: float = 300.0  # a configured server's session unused this long is closed


@dataclass(frozen=True, slots=True)
class McpInventoryConfig:
    enable_refresh: bool = True  # re-list a server's tools when its list is older than the TTL
    tool_ttl_secs: float = 300.0  # how long a cached tool list is trusted
    # parsed, not used yet: smg refreshes a list lazily (on use, past tool_ttl or list_changed),
    # not on a background period as the Rust gateway does
    refresh_interval_secs: float = 60.0
    refresh_on_error: bool = True  # a failed call drops the server's cached list


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: tuple[McpServerConfig, ...] = ()
    pool: McpPoolConfig = field(default_factory=McpPoolConfig)
    inventory: McpInventoryConfig = field(default_factory=McpInventoryConfig)

    def server(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)


def load_mcp_config(path: str, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read and parse the file (`${VAR}` from `environ`, the process's environment by default);
    an unreadable file is a ConfigError too."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"--mcp-config-path {path}: cannot read ({exc.strerror})") from None
    return parse_mcp_config(text, os.environ if environ is None else environ)


def parse_mcp_config(text: str, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Parse the file's text. String values may say `${VAR}` or `${VAR:-default}` (expanded from
    `environ`, empty when None, before any check: a URL from a variable is checked as a URL)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"mcp config: not valid YAML{line}") from None
    if doc is None:
        doc = {}
    doc = expand_tree(doc, {} if environ is None else environ, "mcp config: ")
    top = _mapping(doc, "mcp config")
    _known(top, ("servers", "pool", "inventory"), _NOT_YET, "mcp config")
    raw_servers = top.get("servers", [])
    if not isinstance(raw_servers, list):
        raise ConfigError("mcp config: servers must be a list")
    if len(raw_servers) > MAX_SERVERS:
        raise ConfigError(f"mcp config: at most {MAX_SERVERS} servers")
    servers = tuple(_server(raw, f"servers[{i}]") for i, raw in enumerate(raw_servers))
    names = [s.name for s in servers]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise ConfigError(f"mcp config: server name {dup!r} is used twice")
    return McpConfig(servers, _pool(top.get("pool", {})), _inventory(top.get("inventory", {})))


def _server(raw: Any, where: str) -> McpServerConfig:
    m = _mapping(raw, f"mcp config: {where}")
    protocol = m.get("protocol")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"mcp config: {where}.protocol must be one of {', '.join(PROTOCOLS)}")
    _known(m, _SERVER_KEYS[protocol], _SERVER_NOT_YET, f"mcp config: {where}")
    name = _text(m, "name", where, required=True)
    where = f"{where} ({name})"
    common: dict[str, Any] = {
        "name": name,
        "protocol": protocol,
        "required": _flag(m, "required", where, False),
        "connect_timeout_secs": _seconds(m, "connect_timeout_secs", where, CONNECT_TIMEOUT_S),
        "request_timeout_secs": _seconds(m, "request_timeout_secs", where, REQUEST_TIMEOUT_S),
    }
    if protocol == "stdio":
        args = m.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise ConfigError(f"mcp config: {where}.args must be a list of strings")
        return McpServerConfig(
            command=_text(m, "command", where, required=True),
            args=tuple(str(a) for a in args),
            envs=_pairs(m, "envs", where),
            **common,
        )
    url = _text(m, "url", where, required=True)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"mcp config: {where}.url must be http:// or https://")
    return McpServerConfig(
        url=url, token=_text(m, "token", where), headers=_pairs(m, "headers", where), **common
    )


def _pool(raw: Any) -> McpPoolConfig:
    m = _mapping(raw, "mcp config: pool")
    _known(m, ("max_connections", "idle_timeout"), (), "mcp config: pool")
    n = m.get("max_connections", 100)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("mcp config: pool.max_connections must be an integer >= 1")
    return McpPoolConfig(n, _seconds(m, "idle_timeout", "pool", 300.0))


def _inventory(raw: Any) -> McpInventoryConfig:
    m = _mapping(raw, "mcp config: inventory")
    keys = ("enable_refresh", "tool_ttl", "refresh_interval", "refresh_on_error")
    _known(m, keys, (), "mcp config: inventory")
    return McpInventoryConfig(
        enable_refresh=_flag(m, "enable_refresh", "inventory", True),
        tool_ttl_secs=_seconds(m, "tool_ttl", "inventory", 300.0),
        refresh_interval_secs=_seconds(m, "refresh_interval", "inventory", 60.0),
        refresh_on_error=_flag(m, "refresh_on_error", "inventory", True),
    )


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(f"{where} must be a mapping")
    return raw


def _known(m: Mapping[str, Any], keys: tuple[str, ...], later: tuple[str, ...], where: str) -> None:
    for key in m:
        if key in later:
            raise ConfigError(f"{where}.{key} is not supported by smg yet")
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")


def _text(m: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> Any:
    value = m.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"mcp config: {where}.{key} must be a non-empty string")
    return value


def _flag(m: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = m.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"mcp config: {where}.{key} must be true or false")
    return value


def _seconds(m: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = m.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"mcp config: {where}.{key} must be a number of seconds > 0")
    return float(value)


def _pairs(m: Mapping[str, Any], key: str, where: str) -> tuple[tuple[str, str], ...]:
    value = m.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items()
    ):
        raise ConfigError(f"mcp config: {where}.{key} must map names to strings")
    return tuple((k, str(v)) for k, v in value.items())
