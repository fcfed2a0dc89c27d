"""What the model sees of a tool call (smg/mcp_client/outputs.py): results rendered from their
content blocks, failures as text with a stable code, everything bounded."""

from __future__ import annotations

import pytest

from smg.mcp_client.outputs import (
    PROTOCOL_ERROR,
    TIMEOUT,
    TOOL_ERROR,
    UNAVAILABLE,
    UNKNOWN_SERVER,
    bounded,
    failure_output,
    render_content,
    result_output,
)


def test_text_blocks_are_joined_and_other_kinds_named() -> None:
    blocks = [
        {"type": "text", "text": "first"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///a", "text": "inline"}},
        {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA"}},
        {"type": "resource_link", "uri": "file:///c", "name": "c"},
        {"type": "audio"},
        {},
    ]
    assert render_content(blocks, None).split("\n") == [
        "first",
        "[image content]",
        "inline",
        "[resource file:///b]",
        "[resource file:///c]",
        "[audio content]",
        "[unknown content]",
    ]


def test_structured_content_is_used_only_without_blocks() -> None:
    assert render_content([], {"b": 1, "a": "é"}) == '{"a": "é", "b": 1}'
    assert render_content([{"type": "text", "text": "t"}], {"a": 1}) == "t"
    assert render_content([], None) == ""


def test_a_result_is_a_success_or_a_tool_error() -> None:
    ok = result_output("s", "t", [{"type": "text", "text": "42"}], None, is_error=False)
    assert (ok.server, ok.tool, ok.text, ok.error, ok.is_error) == ("s", "t", "42", None, False)
    bad = result_output("s", "t", [{"type": "text", "text": "no"}], None, is_error=True)
    assert (bad.text, bad.error, bad.is_error) == ("no", TOOL_ERROR, True)
    silent = result_output("s", "t", [], None, is_error=True)
    assert silent.text == "tool 't' failed" and silent.error == TOOL_ERROR


def test_output_is_bounded_and_says_so() -> None:
    out = result_output("s", "t", [{"type": "text", "text": "x" * 100}], None, False, max_chars=10)
    assert out.text == "x" * 10 + "\n[output truncated: 100 characters, 10 kept]"
    assert bounded("short", 10) == "short" and bounded("x" * 10, 10) == "x" * 10


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (TIMEOUT, "tool 'echo' on MCP server 'srv' timed out"),
        (UNAVAILABLE, "MCP server 'srv' is unavailable; tool 'echo' was not called"),
        (UNKNOWN_SERVER, "no MCP server named 'srv'; tool 'echo' was not called"),
        (PROTOCOL_ERROR, "MCP server 'srv' refused the call to tool 'echo'"),
    ],
)
def test_failures_say_what_failed_with_a_stable_code(code: str, words: str) -> None:
    out = failure_output("srv", "echo", code)
    assert (out.text, out.error, out.is_error) == (words, code, True)
    assert failure_output("srv", "echo", code, "ConnectError").text == f"{words}: ConnectError"
