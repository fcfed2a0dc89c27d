"""The MCP servers file (smg/config/mcp.py): the Rust gateway's YAML layout parses into typed
values; a bad file is one ConfigError line naming the key, never a secret."""

from __future__ import annotations

import pytest

from smg.config.knobs import ConfigError
from smg.config.mcp import load_mcp_config, parse_mcp_config

FULL = """
servers:
  - name: search
    protocol: streamable
    url: "https://mcp.example.com/mcp"
    token: "tok-SECRET"
    headers:
      X-Tenant-ID: tenant-123
    required: true
    request_timeout_secs: 5
  - name: files
    protocol: stdio
    command: python
    args: ["-m", "server", 3]
    envs:
      LOG: info
  - name: brave
    protocol: sse
    url: "http://127.0.0.1:9000/sse"
pool:
  max_connections: 50
  idle_timeout: 600
inventory:
  enable_refresh: false
  tool_ttl: 120
  refresh_interval: 30
  refresh_on_error: false
"""


def test_full_layout_parses_into_typed_values() -> None:
    cfg = parse_mcp_config(FULL)
    search, files, brave = cfg.servers
    assert (search.name, search.protocol, search.url) == (
        "search", "streamable", "https://mcp.example.com/mcp"
    )  # fmt: skip
    assert search.token == "tok-SECRET" and search.headers == (("X-Tenant-ID", "tenant-123"),)
    assert search.required and search.request_timeout_secs == 5.0
    assert search.connect_timeout_secs == 10.0
    assert (files.command, files.args, files.envs) == (
        "python",
        ("-m", "server", "3"),
        (("LOG", "info"),),
    )
    assert files.url is None and not files.required and files.request_timeout_secs == 30.0
    assert brave.protocol == "sse" and brave.token is None
    assert (cfg.pool.max_connections, cfg.pool.idle_timeout_secs) == (50, 600.0)
    inv = cfg.inventory
    assert (inv.enable_refresh, inv.tool_ttl_secs, inv.refresh_interval_secs) == (
        False,
        120.0,
        30.0,
    )
    assert not inv.refresh_on_error
    assert cfg.server("files") is files and cfg.server("nope") is None


def test_defaults_follow_the_rust_gateway() -> None:
    cfg = parse_mcp_config("servers:\n  - {name: a, protocol: sse, url: 'http://h/sse'}\n")
    assert (cfg.pool.max_connections, cfg.pool.idle_timeout_secs) == (100, 300.0)
    assert (cfg.inventory.tool_ttl_secs, cfg.inventory.refresh_interval_secs) == (300.0, 60.0)
    assert cfg.inventory.enable_refresh and cfg.inventory.refresh_on_error
    assert parse_mcp_config("").servers == ()


def test_secrets_are_not_in_repr() -> None:
    text = repr(parse_mcp_config(FULL))
    assert "tok-SECRET" not in text and "tenant-123" not in text and "search" in text


STDIO = "servers: [{name: a, protocol: stdio, command: x, %s}]"
SSE = "servers: [{name: a, protocol: sse, %s}]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("servers: [1, 2", "not valid YAML at line"),
        ("- a\n- b\n", "mcp config must be a mapping"),
        ("servers: {a: 1}", "servers must be a list"),
        (SSE % "protocol: ws", "servers[0].protocol must be one of stdio, sse, streamable"),
        ("servers: [{name: a, protocol: stdio}]", "(a).command must be a non-empty string"),
        ("servers: [{protocol: stdio, command: x}]", "servers[0].name must be a non-empty string"),
        (SSE % "required: false", "servers[0] (a).url must be a non-empty string"),
        (SSE % "url: 'ftp://h'", "servers[0] (a).url must be http:// or https://"),
        (STDIO % "url: 'http://h'", "unknown key 'url'"),
        (STDIO % "tools: {}", "servers[0].tools is not supported by smg yet"),
        (STDIO % "args: a", "(a).args must be a list of strings"),
        (STDIO % "envs: [1]", "(a).envs must map names to strings"),
        (STDIO % "required: 'yes'", "(a).required must be true or false"),
        (STDIO % "request_timeout_secs: 0", "request_timeout_secs must be a number of seconds > 0"),
        (STDIO % "connect_timeout_secs: x", "connect_timeout_secs must be a number of seconds > 0"),
        (STDIO % "}, {name: a, protocol: sse, url: 'http://h'", "server name 'a' is used twice"),
        ("proxy: {http: 'http://p'}", "mcp config.proxy is not supported by smg yet"),
        ("colour: red", "unknown key 'colour'"),
        ("pool: {max_connections: 0}", "pool.max_connections must be an integer >= 1"),
        ("pool: {idle_timeout: -1}", "pool.idle_timeout must be a number of seconds > 0"),
        ("inventory: {tool_ttl: true}", "inventory.tool_ttl must be a number of seconds > 0"),
    ],
)
def test_bad_files_are_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_mcp_config(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_bad_token_or_header_never_appears_in_the_error() -> None:
    text = "servers: [{name: a, protocol: sse, url: 'http://h', token: 'tok-SECRET', headers: [x]}]"
    with pytest.raises(ConfigError) as info:
        parse_mcp_config(text)
    assert "tok-SECRET" not in str(info.value) and "headers" in str(info.value)


def test_load_reads_a_file_and_names_an_unreadable_one(tmp_path) -> None:
    path = tmp_path / "mcp.yaml"
    path.write_text(FULL)
    assert len(load_mcp_config(str(path)).servers) == 3
    with pytest.raises(ConfigError, match="cannot read"):
        load_mcp_config(str(tmp_path / "missing.yaml"))


def test_the_flag_reaches_the_config_tree(tmp_path) -> None:
    from smg.cli import gateway_config_from, parse

    assert gateway_config_from(parse([])[1]).mcp.mcp_config_path is None
    _, ns = parse(["--mcp-config-path", str(tmp_path / "mcp.yaml")])
    assert gateway_config_from(ns).mcp.mcp_config_path == str(tmp_path / "mcp.yaml")


def test_the_gateway_reads_the_file_at_construction_and_a_bad_one_stops_it(tmp_path) -> None:
    from smg.app.gateway import Gateway
    from smg.config import GatewayConfig, replace_path

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(FULL)
    bad.write_text("servers: [{name: a, protocol: ws}]")
    gw = Gateway(replace_path(GatewayConfig(), "mcp", mcp_config_path=str(good)))
    assert [s.name for s in gw.mcp_config.servers] == ["search", "files", "brave"]
    assert Gateway(GatewayConfig()).mcp_config.servers == ()
    with pytest.raises(ConfigError, match=r"servers\[0\]\.protocol"):
        Gateway(replace_path(GatewayConfig(), "mcp", mcp_config_path=str(bad)))
