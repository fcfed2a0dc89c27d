"""MCP tools in a Responses request: checked, offered to the model, and their items (pure; no IO).

A request's `{"type": "mcp", "server_label": ...}` tool names an MCP server: one of the gateway's
`--mcp-config-path` servers by its label, or (with `server_url`) a server reached for this request
only. `allowed_tools` narrows what it offers; `require_approval` ("never", the Rust gateway's
default; "always"; or `{"never": {"tool_names": [...]}}`: every tool but those, and/or
`{"always": {...}}`: those tools only) decides which calls wait for the client's
`mcp_approval_response`. `headers` / `authorization` go to that server
only: the response object echoes the tool without them.

What the model is told: each MCP tool as a function tool of the same name (the first server to
offer a name keeps it; a client's own function tool always keeps its name). The items the loop
adds to the output:

    mcp_list_tools         a server's tools, once per response           mcpl_…
    mcp_call               a call the gateway ran, with its output        mcp_…
    mcp_approval_request   a call waiting for the client's approval       mcpr_…
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from smg import errors

DEFAULT_MAX_ITERATIONS = 10  # model rounds with MCP calls per response (the Rust gateway's)
MAX_MCP_SERVERS = 16  # MCP tools (servers) in one request
MAX_HEADERS = 32


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One `{"type": "mcp"}` entry of a request's tools."""

    label: str
    url: str | None  # None: the configured server of that label
    headers: tuple[tuple[str, str], ...]
    allowed: frozenset[str] | None  # None: every tool the server offers
    always: frozenset[str] | None  # tools needing approval (None: every tool)
    never: frozenset[str]  # tools never needing approval (with always=None: the exceptions)

    def needs_approval(self, tool: str) -> bool:
        if tool in self.never:
            return False
        return self.always is None or tool in self.always


def parse_mcp_tool(raw: dict[str, Any], where: str) -> McpServerSpec:
    """A checked MCP tool entry, or a 400 naming what is wrong."""
    for key in raw:
        if key not in _MCP_KEYS:
            raise errors.invalid_value(
                f"{where}.{key}: unknown field of an MCP tool", param=f"{where}.{key}"
            )
    label = raw.get("server_label")
    if not isinstance(label, str) or not label:
        raise errors.invalid_type(
            f"{where}.server_label must be a non-empty string", param=f"{where}.server_label"
        )
    url = raw.get("server_url")
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise errors.invalid_value(
                f"{where}.server_url must be an http(s) URL", param=f"{where}.server_url"
            )
    if raw.get("connector_id") is not None:
        raise errors.invalid_value(
            f"{where}.connector_id: connectors are not supported; give a server_url",
            param=f"{where}.connector_id",
        )
    headers = _headers(raw.get("headers"), raw.get("authorization"), where)
    if headers and url is None:
        raise errors.invalid_value(
            f"{where}.headers: only a server given by server_url takes headers",
            param=f"{where}.headers",
        )
    always, never = _approval(raw.get("require_approval"), where)
    return McpServerSpec(
        label=label,
        url=url,
        headers=headers,
        allowed=_names(raw.get("allowed_tools"), f"{where}.allowed_tools"),
        always=always,
        never=never,
    )


_MCP_KEYS = frozenset(
    {
        "type", "server_label", "server_url", "server_description", "allowed_tools",
        "require_approval", "headers", "authorization", "connector_id",
    }
)  # fmt: skip


def echoed(raw: dict[str, Any]) -> dict[str, Any]:
    """The tool as the response object shows it: without its credentials."""
    shown = {k: v for k, v in raw.items() if k not in ("headers", "authorization")}
    shown["headers"] = None
    return shown


def _headers(raw: Any, authorization: Any, where: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    if raw is not None:
        if not isinstance(raw, dict) or len(raw) > MAX_HEADERS:
            raise errors.invalid_type(
                f"{where}.headers must be an object of at most {MAX_HEADERS} strings",
                param=f"{where}.headers",
            )
        for k, v in raw.items():
            if not isinstance(v, str) or not k or any(c in k + v for c in "\r\n\0"):
                raise errors.invalid_value(
                    f"{where}.headers: names and values must be plain strings",
                    param=f"{where}.headers",
                )
            pairs.append((k, v))
    if authorization is not None:
        if not isinstance(authorization, str) or any(c in authorization for c in "\r\n\0"):
            raise errors.invalid_type(
                f"{where}.authorization must be a string", param=f"{where}.authorization"
            )
        pairs.append(("Authorization", f"Bearer {authorization}"))
    return tuple(pairs)


def _names(raw: Any, where: str) -> frozenset[str] | None:
    """`allowed_tools` / a `tool_names` filter: a list of names or `{"tool_names": [...]}`."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        for key in raw:
            if key not in ("tool_names", "read_only"):
                raise errors.invalid_value(f"{where}.{key}: unknown filter", param=where)
        if raw.get("read_only") is not None:
            raise errors.invalid_value(
                f"{where}.read_only: filtering by annotations is not supported", param=where
            )
        raw = raw.get("tool_names", [])
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        raise errors.invalid_type(f"{where} must be a list of tool names", param=where)
    return frozenset(raw)


def _approval(raw: Any, where: str) -> tuple[frozenset[str] | None, frozenset[str]]:
    """(always, never): which tools need the client's approval."""
    at = f"{where}.require_approval"
    if raw is None or raw == "never":
        return frozenset(), frozenset()
    if raw == "always":
        return None, frozenset()
    if not isinstance(raw, dict) or not raw or any(k not in ("always", "never") for k in raw):
        raise errors.invalid_value(
            f"{at} must be 'always', 'never' or {{'always'|'never': {{'tool_names': [...]}}}}",
            param=at,
        )
    # `{"never": [...]}` alone: every tool but those; with an `always` list: those only
    always = _names(raw.get("always"), f"{at}.always") if "always" in raw else None
    never = _names(raw.get("never"), f"{at}.never") or frozenset()
    return always, never


# --- what the model is offered --------------------------------------------------------------------
class McpTool(Protocol):
    """A tool a server offers (smg.mcp_client.outputs.McpTool)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Offer:
    """The MCP tools of a request, as the model sees them."""

    functions: tuple[dict[str, Any], ...]  # chat-completions function tools
    owner: Mapping[str, str]  # function name -> server label
    approval: frozenset[str]  # function names whose calls wait for approval


def offer(
    specs: Sequence[McpServerSpec],
    listed: Mapping[str, Sequence[McpTool]],
    taken: Iterable[str],
) -> Offer:
    """Function tools for the servers' tools (`listed` by label), in order; a name already
    `taken` (a client's function tool, or an earlier server's) is not offered again."""
    names = set(taken)
    functions: list[dict[str, Any]] = []
    owner: dict[str, str] = {}
    approval: set[str] = set()
    for spec in specs:
        for tool in listed.get(spec.label, ()):
            if tool.name in names or (spec.allowed is not None and tool.name not in spec.allowed):
                continue
            names.add(tool.name)
            owner[tool.name] = spec.label
            if spec.needs_approval(tool.name):
                approval.add(tool.name)
            function: dict[str, Any] = {"name": tool.name, "parameters": dict(tool.input_schema)}
            if tool.description:
                function["description"] = tool.description
            functions.append({"type": "function", "function": function})
    return Offer(tuple(functions), owner, frozenset(approval))


def list_tools_item(
    item_id: str, spec: McpServerSpec, tools: Sequence[McpTool] | None, error: str | None
) -> dict[str, Any]:
    """The `mcp_list_tools` item of one server (`tools` None: it could not be listed)."""
    shown = [
        {
            "name": t.name,
            "description": t.description or None,
            "input_schema": dict(t.input_schema),
            "annotations": None,
        }
        for t in tools or ()
        if spec.allowed is None or t.name in spec.allowed
    ]
    return {
        "id": item_id,
        "type": "mcp_list_tools",
        "server_label": spec.label,
        "tools": shown,
        "error": error,
    }


TOOL_ERROR = "tool_error"  # the tool ran and said it failed (smg.mcp_client.outputs' code)
_RPC_CODES = {"bad_arguments": -32602, "unknown_server": -32601, "protocol_error": -32600}


def call_error(code: str | None, text: str) -> dict[str, Any] | None:
    """An `mcp_call` item's `error` (OpenAI's shapes) for a call that failed with `code`: the
    tool's own failure, or a protocol error (the call could not run, or did not finish)."""
    if code is None:
        return None
    if code == TOOL_ERROR:
        return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}
    return {"type": "mcp_protocol_error", "code": _RPC_CODES.get(code, -32000), "message": text}


def call_result(item: dict[str, Any], text: str, code: str | None) -> None:
    """An `mcp_call` item completed by its output (in place); `code`: why it failed, if it did."""
    item["output"] = text
    item["error"] = call_error(code, text)
    item["status"] = "completed" if code is None else "failed"


def approval_responses(raw: Any) -> dict[str, bool]:
    """The client's `mcp_approval_response` items in `input`: request id -> approved."""
    if not isinstance(raw, list):
        return {}
    out: dict[str, bool] = {}
    for i, item in enumerate(raw):
        if isinstance(item, dict) and item.get("type") == "mcp_approval_response":
            where = f"input[{i}]"
            req_id, approve = item.get("approval_request_id"), item.get("approve")
            if not isinstance(req_id, str) or not isinstance(approve, bool):
                raise errors.invalid_type(
                    f"{where} needs an 'approval_request_id' string and an 'approve' boolean",
                    param=where,
                )
            out[req_id] = approve
    return out
