"""A request-level MCP server's URL (smg/mcp_client/server_url.py): http(s) only, the transport
picked by the path as the Rust gateway does, the origin an address check is given; a refusal
names the label and the reason, never the URL."""

from __future__ import annotations

import pytest

from smg.mcp_client.server_url import InvalidServerUrl, ServerUrl, parse_server_url


@pytest.mark.parametrize(
    ("url", "protocol", "origin"),
    [
        ("http://127.0.0.1:8931/mcp", "streamable", "http://127.0.0.1:8931"),
        ("https://mcp.example.com/mcp?key=k", "streamable", "https://mcp.example.com:443"),
        ("http://mcp.example.com/sse", "sse", "http://mcp.example.com:80"),
        ("https://h.example/v1/sse/stream", "sse", "https://h.example:443"),
        ("HTTP://[::1]:9000/", "streamable", "http://[::1]:9000"),
        ("  https://h.example  ", "streamable", "https://h.example:443"),
    ],
)
def test_transport_and_origin(url: str, protocol: str, origin: str) -> None:
    assert parse_server_url("s", url) == ServerUrl(url.strip(), protocol, origin)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        ("ftp://h.example/SECRET", "must be http:// or https://"),
        ("file:///etc/SECRET", "must be http:// or https://"),
        ("127.0.0.1:8000/SECRET", "must be http:// or https://"),
        ("https://user:SECRET@h.example/mcp", "credentials do not belong in server_url"),
        ("https://h.example/mcp#SECRET", "has no fragment"),
        ("https:///SECRET", "has no host"),
        ("http://h.example:0/SECRET", "port 0"),
        ("http://h.example:99999/SECRET", "is malformed"),
    ],
)
def test_refusals_name_the_label_not_the_url(url: object, reason: str) -> None:
    with pytest.raises(InvalidServerUrl) as info:
        parse_server_url("deepwiki", url)
    text = str(info.value)
    assert text.startswith("MCP server 'deepwiki': ") and reason in text
    assert "SECRET" not in text and isinstance(info.value, ValueError)
