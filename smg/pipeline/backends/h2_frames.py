"""HTTP/2 wire vocabulary (RFC 9113): frame types, flags, settings, error codes, frame encoding.

Shared by the sans-IO client (`h2_client`) and the tests that script raw HTTP/2 servers.
"""

from __future__ import annotations

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS_FRAME, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY_FRAME, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20

SETTINGS_HEADER_TABLE_SIZE = 1
SETTINGS_ENABLE_PUSH = 2
SETTINGS_MAX_CONCURRENT_STREAMS = 3
SETTINGS_INITIAL_WINDOW_SIZE = 4
SETTINGS_MAX_FRAME_SIZE = 5
SETTINGS_MAX_HEADER_LIST_SIZE = 6

ERROR_NO_ERROR = 0
ERROR_PROTOCOL = 1
ERROR_FLOW_CONTROL = 3
ERROR_FRAME_SIZE = 6
ERROR_REFUSED_STREAM = 7
ERROR_CANCEL = 8
ERROR_COMPRESSION = 9
ERROR_ENHANCE_YOUR_CALM = 11

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384  # what we accept: we never raise SETTINGS_MAX_FRAME_SIZE
MAX_STREAM_ID = 2**31 - 1


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


class H2ProtocolError(Exception):
    """The peer broke HTTP/2 (or gRPC framing): the connection cannot go on. `code` is the RFC
    9113 error code for our GOAWAY; `events` holds what the same `receive` call parsed before
    the error (deliver it, then fail)."""

    events: list[tuple[int, int, object]] = []  # set per instance by `receive`

    def __init__(self, message: str, code: int = ERROR_PROTOCOL) -> None:
        super().__init__(message)
        self.code = code
