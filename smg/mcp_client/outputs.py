"""What the model sees of a tool call: pure values and renderers, no I/O.

A tool call never raises to its caller: the tool's own error, a deadline, a server that cannot be
reached all become a `ToolOutput` with `is_error` set and a stable `error` code, and text that says
what failed (never a token, header or URL). Output text is bounded: past `max_chars` it is cut and
says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# the stable codes of a failed call (metrics and logs key on them)
TOOL_ERROR = "tool_error"  # the tool ran and reported an error (`isError`)
TIMEOUT = "timeout"  # no answer within the server's request_timeout_secs
UNAVAILABLE = "server_unavailable"  # the server could not be started, reached or initialized
UNKNOWN_SERVER = "unknown_server"  # no such server in the config
PROTOCOL_ERROR = "protocol_error"  # the server answered the call with an MCP error

DEFAULT_MAX_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server offers, as the model will be told about it."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    server: str
    tool: str
    text: str
    error: str | None = None  # one of the codes above; None: the call succeeded

    @property
    def is_error(self) -> bool:
        return self.error is not None


def bounded(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[output truncated: {len(text)} characters, {max_chars} kept]"


def render_content(blocks: Iterable[Mapping[str, Any]], structured: Any) -> str:
    """The text of a result's content blocks (given as their JSON dicts): text blocks verbatim,
    other kinds named; with no text, the structured content as JSON."""
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource" and isinstance(block.get("resource"), Mapping):
            resource = block["resource"]
            parts.append(str(resource.get("text", f"[resource {resource.get('uri', '')}]")))
        elif kind == "resource_link":
            parts.append(f"[resource {block.get('uri', '')}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


def result_output(
    server: str,
    tool: str,
    blocks: Iterable[Mapping[str, Any]],
    structured: Any,
    is_error: bool,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> ToolOutput:
    text = bounded(render_content(blocks, structured), max_chars)
    if is_error:
        return ToolOutput(server, tool, text or f"tool {tool!r} failed", TOOL_ERROR)
    return ToolOutput(server, tool, text)


def failure_output(server: str, tool: str, error: str, detail: str = "") -> ToolOutput:
    """A call that did not produce a result. `detail` must hold no secret (an exception's type
    name, or a message the server itself sent)."""
    what = {
        TIMEOUT: f"tool {tool!r} on MCP server {server!r} timed out",
        UNAVAILABLE: f"MCP server {server!r} is unavailable; tool {tool!r} was not called",
        UNKNOWN_SERVER: f"no MCP server named {server!r}; tool {tool!r} was not called",
        PROTOCOL_ERROR: f"MCP server {server!r} refused the call to tool {tool!r}",
    }[error]
    return ToolOutput(server, tool, f"{what}: {detail}" if detail else what, error)
