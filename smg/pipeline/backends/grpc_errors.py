"""What the gRPC adapter knows besides moving messages: channel options and credentials, URLs,
error classes.

Errors are classified like the HTTP adapter's: the engine could not be reached
(`UpstreamError("connect")`), did not answer in time (`UpstreamError("timeout")`), or refused the
request (`EngineError`, with the gRPC status and the HTTP status the runner answers with).
"""

from __future__ import annotations

from urllib.parse import unquote

import grpc

from smg.pipeline.backends.http import UpstreamError
from smg.tls import WorkerTls

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # long prompts as token ids, tokenizer zip chunks
_COMMON_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),  # the gateway's runner retries, on another worker if need be
    ("grpc.max_reconnect_backoff_ms", 5_000),  # a restarted engine is found in 5 s, not 120 s
    ("grpc.use_local_subchannel_pool", 1),  # a connection per channel, never shared
)
DATA_CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    *_COMMON_OPTIONS,
    ("grpc.keepalive_time_ms", 30_000),  # ping after 30 s without bytes ...
    ("grpc.keepalive_timeout_ms", 10_000),  # ... and give up on the connection 10 s later
    ("grpc.keepalive_permit_without_calls", 1),  # idle connections are checked too
    ("grpc.http2.max_pings_without_data", 0),  # a long prefill sends no data: keep pinging
)
PROBE_CHANNEL_OPTIONS = _COMMON_OPTIONS

# gRPC status -> the HTTP status the runner should answer with when the engine refuses a request
_HTTP_BY_GRPC = {
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    "CANCELLED": 499,
    "UNIMPLEMENTED": 501,
    "RESOURCE_EXHAUSTED": 503,
    "ABORTED": 503,
}


class EngineError(Exception):
    """The engine answered with a gRPC error status before any output."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status  # the gRPC status code name, e.g. "INVALID_ARGUMENT"
        self.detail = detail

    @property
    def http_status(self) -> int:
        return _HTTP_BY_GRPC.get(self.status, 502)


def grpc_target(url: str) -> str:
    """`grpc://host:port` or `grpcs://host:port` -> `host:port`."""
    if not url.startswith(("grpc://", "grpcs://")):
        raise ValueError(f"not a grpc:// or grpcs:// URL: {url!r}")
    target = url.split("://", 1)[1].rstrip("/")
    if not target:
        raise ValueError(f"no address in {url!r}")
    return target


def tls_for(url: str, tls: WorkerTls | None) -> WorkerTls | None:
    """How to reach the engine at `url`: over TLS for `grpcs://` (with `tls`, else the system's
    trust store and no client certificate), plaintext (None) for `grpc://`."""
    if not url.startswith("grpcs://"):
        return None
    return tls or WorkerTls.system()


def open_channel(
    target: str, options: tuple[tuple[str, int], ...], tls: WorkerTls | None
) -> grpc.aio.Channel:
    """A grpc.aio channel to `target`: plaintext, or TLS with `tls`'s roots and client cert."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(tls.ca_pem, tls.key_pem, tls.cert_pem)
    return grpc.aio.secure_channel(target, credentials, options=options)


def describe(exc: grpc.aio.AioRpcError) -> str:
    return f"{exc.code().name}: {exc.details() or 'no details'}"


def classify(exc: grpc.aio.AioRpcError, url: str, timeout_s: float | None) -> Exception:
    return classify_code(exc.code().name, exc.details() or "", url, timeout_s)


def classify_code(code: str, details: str, url: str, timeout_s: float | None) -> Exception:
    if code == "UNAVAILABLE":
        return UpstreamError("connect", f"{url}: {details or 'unavailable'}")
    if code == "DEADLINE_EXCEEDED":
        within = f" in {timeout_s:g} s" if timeout_s else ""
        return UpstreamError("timeout", f"{url}: no answer{within}")
    return EngineError(code, details)


STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


class CallError(Exception):
    """A call ended without OK: `code` is the gRPC status name (e.g. "UNAVAILABLE")."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


# the gRPC code of a response whose HTTP status is not 200 (gRPC's HTTP-to-status mapping)
_HTTP_STATUS_CODES = {
    "400": "INTERNAL",
    "401": "UNAUTHENTICATED",
    "403": "PERMISSION_DENIED",
    "404": "UNIMPLEMENTED",
    "429": "UNAVAILABLE",
    "502": "UNAVAILABLE",
    "503": "UNAVAILABLE",
    "504": "UNAVAILABLE",
}


def http_refusal(headers: list[tuple[str, str]]) -> tuple[str, str] | None:
    """A response head's (code, details) when its HTTP status is not 200 (the call fails)."""
    status = next((v for k, v in headers if k == ":status"), "")
    if status == "200":
        return None
    code = _HTTP_STATUS_CODES.get(status, "UNKNOWN")
    return code, f"the engine answered HTTP status {status or 'none'}"


def status_of(headers: list[tuple[str, str]]) -> tuple[str, str]:
    """The gRPC status name and message of a response's trailers (or trailers-only headers)."""
    code: str | None = None
    message = ""
    for name, value in headers:
        if name == "grpc-status":
            code = STATUS_NAMES.get(int(value), "UNKNOWN") if value.isdigit() else "UNKNOWN"
        elif name == "grpc-message":
            message = unquote(value)
    if code is None:
        return "INTERNAL", "the stream ended without a grpc-status"
    return code, message


def grpc_timeout(timeout_s: float) -> str:
    """The `grpc-timeout` header value for a deadline `timeout_s` from now."""
    ms = max(1, int(timeout_s * 1000))
    return f"{ms}m" if ms < 100_000_000 else f"{min(int(timeout_s), 99_999_999)}S"
