"""The sans-IO HTTP/2 client against a hostile server: every bound and RFC 9113 error, as tables.

Each attack is bytes built here, fed whole, one byte at a time and in random chunks: the events
before the error, the error's code (connection errors) or the stream reset (stream errors) must
be the same every way, and a connection error must leave a GOAWAY with that code to send."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from smg.pipeline.backends import hpack
from smg.pipeline.backends.h2_client import (
    END,
    HEADERS,
    MESSAGES,
    STREAM_ERROR,
    ClientConnection,
    Event,
    H2ProtocolError,
)
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    ERROR_CANCEL,
    ERROR_COMPRESSION,
    ERROR_ENHANCE_YOUR_CALM,
    ERROR_FLOW_CONTROL,
    ERROR_PROTOCOL,
    FLAG_ACK,
    FLAG_END_HEADERS,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    MAX_WINDOW,
    PING,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_HEADER_LIST_SIZE,
    WINDOW_UPDATE,
    frame,
)
from smg.pipeline.backends.h2_headers import MAX_CONTINUATIONS, MAX_HEADER_LIST_BYTES
from smg.pipeline.backends.h2_send import MAX_OWED_CONTROL_FRAMES

from .test_h2_client import grpc_message, headers_frame, opened, parse_frames, server_settings

HOW = ["whole", "bytes", "random"]


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def data_frames(sid: int, data: bytes) -> bytes:
    return b"".join(frame(DATA, 0, sid, data[i : i + 16_384]) for i in range(0, len(data), 16_384))


@dataclass
class Outcome:
    events: list[Event]
    error: int | None  # the connection error's code, or None
    sent: list[tuple[int, int, int, bytes]]  # the frames we queued meanwhile


def drive(conn: ClientConnection, data: bytes, how: str, seed: int = 0) -> Outcome:
    """Feed `data` as `how` says, stopping at a connection error; what came out."""
    if how == "whole":
        chunks = [data]
    elif how == "bytes":
        chunks = [data[i : i + 1] for i in range(len(data))]
    else:
        rng, chunks, pos = random.Random(seed), [], 0
        while pos < len(data):
            step = rng.randint(1, 300)
            chunks.append(data[pos : pos + step])
            pos += step
    events: list[Event] = []
    sent: list[tuple[int, int, int, bytes]] = []
    for chunk in chunks:
        try:
            events += conn.receive(chunk)
        except H2ProtocolError as exc:
            events += exc.events
            sent += parse_frames(conn.data_to_send())
            return Outcome(events, exc.code, sent)
    sent += parse_frames(conn.data_to_send())
    return Outcome(events, None, sent)


def goaway_code(out: Outcome) -> int:
    [goaway] = [f for f in out.sent if f[0] == GOAWAY_FRAME]
    return int.from_bytes(goaway[3][4:8], "big")


def resets(out: Outcome) -> list[tuple[int, int]]:
    return [(f[2], int.from_bytes(f[3], "big")) for f in out.sent if f[0] == RST_STREAM]


# --- connection errors: one table ---------------------------------------------------------------

BLOCK_CAP = MAX_HEADER_LIST_BYTES


def continuation_flood(sid: int) -> bytes:
    """HEADERS without END_HEADERS, then 1 MB of CONTINUATION that never ends the block."""
    out = frame(HEADERS_FRAME, 0, sid, hpack.encode([(":status", "200")]))
    return out + frame(CONTINUATION, 0, sid, b"\x00" * 16_000) * 64


def empty_continuations(sid: int) -> bytes:
    out = frame(HEADERS_FRAME, 0, sid, hpack.encode([(":status", "200")]))
    return out + frame(CONTINUATION, 0, sid) * (MAX_CONTINUATIONS + 10)


def hpack_bomb(sid: int) -> bytes:
    """One 4000-byte field added to the dynamic table, then referenced by index 2000 times: a
    4 KB block that decodes to 8 MB."""
    name, value = b"x-big", b"v" * 3_900
    add = b"\x40" + hpack.encode_int(len(name), 7) + name + hpack.encode_int(len(value), 7) + value
    block = add + bytes([0x80 | 62]) * 2_000
    return frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block)


def ping_flood(sid: int) -> bytes:
    return frame(PING, 0, 0, b"8 bytes!") * (MAX_OWED_CONTROL_FRAMES + 50)


def settings_flood(sid: int) -> bytes:
    return server_settings() * (MAX_OWED_CONTROL_FRAMES + 50)


def connection_window_overflow(sid: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, 0, u32(MAX_WINDOW))  # 65,535 + 2^31-1 > 2^31-1


def connection_window_zero(sid: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, 0, u32(0))


def initial_window_overflow(sid: int) -> bytes:
    """A stream's window at 2^31-1 after a WINDOW_UPDATE, then SETTINGS raise every window."""
    grow = frame(WINDOW_UPDATE, 0, sid, u32(MAX_WINDOW - 65_535))
    return grow + server_settings((SETTINGS_INITIAL_WINDOW_SIZE, 70_000))


def table_size_update_after_a_field(sid: int) -> bytes:
    block = bytes([0x88]) + bytes([0x20 | 10])  # ":status: 200", then a size update
    return frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block)


def table_size_update_above_our_setting(sid: int) -> bytes:
    block = hpack.encode_int(8_192, 5, 0x20)  # our SETTINGS_HEADER_TABLE_SIZE is 4096
    return frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block)


def headers_on_an_idle_stream(sid: int) -> bytes:
    return headers_frame(sid + 2, [(":status", "200")])


def data_on_a_push_stream(sid: int) -> bytes:
    return frame(DATA, 0, 2, grpc_message(b"x"))


def server_enables_push(sid: int) -> bytes:
    return server_settings((SETTINGS_ENABLE_PUSH, 1))


CONNECTION_ERRORS = {
    "continuation_flood": (continuation_flood, ERROR_ENHANCE_YOUR_CALM),
    "empty_continuations": (empty_continuations, ERROR_ENHANCE_YOUR_CALM),
    "hpack_bomb": (hpack_bomb, ERROR_ENHANCE_YOUR_CALM),
    "ping_flood": (ping_flood, ERROR_ENHANCE_YOUR_CALM),
    "settings_flood": (settings_flood, ERROR_ENHANCE_YOUR_CALM),
    "connection_window_overflow": (connection_window_overflow, ERROR_FLOW_CONTROL),
    "connection_window_zero": (connection_window_zero, ERROR_PROTOCOL),
    "initial_window_overflow": (initial_window_overflow, ERROR_FLOW_CONTROL),
    "table_size_update_after_a_field": (table_size_update_after_a_field, ERROR_COMPRESSION),
    "table_size_update_above_our_setting": (table_size_update_above_our_setting, ERROR_COMPRESSION),
    "headers_on_an_idle_stream": (headers_on_an_idle_stream, ERROR_PROTOCOL),
    "data_on_a_push_stream": (data_on_a_push_stream, ERROR_PROTOCOL),
    "server_enables_push": (server_enables_push, ERROR_PROTOCOL),
}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("attack", CONNECTION_ERRORS)
def test_connection_errors(attack: str, how: str) -> None:
    build, code = CONNECTION_ERRORS[attack]
    conn, sid = opened()
    # a good message first: it is delivered before the error, whatever the chunking
    prologue = headers_frame(sid, [(":status", "200")]) + frame(DATA, 0, sid, grpc_message(b"ok"))
    attack_bytes = build(sid)
    if attack in ("continuation_flood", "empty_continuations", "hpack_bomb"):
        conn2, sid2 = opened()  # these attack a stream's first headers
        conn, sid, prologue = conn2, sid2, b""
        attack_bytes = build(sid)
    out = drive(conn, prologue + attack_bytes, how)
    assert out.error == code, out
    assert goaway_code(out) == code
    assert conn.goaway and not conn.can_open
    if prologue:
        assert out.events == [(HEADERS, sid, [(":status", "200")]), (MESSAGES, sid, [b"ok"])]
    assert len(conn.header_blocks._data) <= BLOCK_CAP  # never buffered past the cap


def test_we_advertise_the_header_list_cap() -> None:
    conn = ClientConnection(max_header_list_bytes=10_000)
    settings = next(f for f in parse_frames(conn.data_to_send()) if f[0] == SETTINGS)[3]
    pairs = {int.from_bytes(settings[i : i + 2], "big"): int.from_bytes(settings[i + 2 : i + 6])
             for i in range(0, len(settings), 6)}  # fmt: skip
    assert pairs[SETTINGS_MAX_HEADER_LIST_SIZE] == 10_000


def test_headers_up_to_the_cap_pass_across_continuations() -> None:
    sid = 1
    headers = [(":status", "200"), *((f"x-{i}", "v" * 900) for i in range(60))]  # ~56 KiB
    block = hpack.encode(headers)
    assert MAX_HEADER_LIST_BYTES // 2 < len(block) < MAX_HEADER_LIST_BYTES
    data = frame(HEADERS_FRAME, 0, sid, block[:16_000])
    for i in range(16_000, len(block), 16_000):
        last = i + 16_000 >= len(block)
        data += frame(CONTINUATION, FLAG_END_HEADERS if last else 0, sid, block[i : i + 16_000])
    for how in HOW:
        c, s = opened()
        assert s == sid
        assert drive(c, data, how).events == [(HEADERS, sid, headers)]


# --- a peer that reads its ACKs is fine -----------------------------------------------------------


def test_pings_are_fine_when_the_answers_are_taken() -> None:
    conn, _ = opened()
    for _ in range(10):  # 10 x 200 PINGs, the ACKs taken after each batch (the peer reads them)
        conn.receive(frame(PING, 0, 0, b"12345678") * 200)
        acks = parse_frames(conn.data_to_send())
        assert len(acks) == 200 and all(f[:2] == (PING, FLAG_ACK) for f in acks)


# --- stream errors --------------------------------------------------------------------------------

STREAM_ERRORS = {
    "stream_window_overflow": (u32(MAX_WINDOW), ERROR_FLOW_CONTROL),
    "stream_window_zero": (u32(0), ERROR_PROTOCOL),
}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("attack", STREAM_ERRORS)
def test_stream_errors_reset_that_stream_only(attack: str, how: str) -> None:
    payload, code = STREAM_ERRORS[attack]
    conn, sid = opened()
    other = conn.start_call(b"", b"req")
    conn.data_to_send()
    data = frame(WINDOW_UPDATE, 0, sid, payload)
    data += headers_frame(other, [(":status", "200")]) + frame(DATA, 0, other, grpc_message(b"y"))
    data += headers_frame(other, [("grpc-status", "0")], end=True)
    out = drive(conn, data, how)
    assert out.error is None
    assert out.events[0][:2] == (STREAM_ERROR, sid)
    assert out.events[0][2][0] == "INTERNAL"  # type: ignore[index]
    assert [e[0] for e in out.events[1:]] == [HEADERS, MESSAGES, END]  # the other goes on
    assert resets(out) == [(sid, code)]
    assert sid not in conn.streams and conn.can_open


def test_a_window_of_exactly_2_31_minus_1_is_fine() -> None:
    conn, sid = opened()
    conn.receive(frame(WINDOW_UPDATE, 0, 0, u32(MAX_WINDOW - 65_535)))
    conn.receive(frame(WINDOW_UPDATE, 0, sid, u32(MAX_WINDOW - 65_535)))
    assert conn.send_window == MAX_WINDOW - len(grpc_message(b"request"))
    assert conn.streams[sid].send_window == MAX_WINDOW - len(grpc_message(b"request"))


# --- what we grant: the receive window ------------------------------------------------------------


def grants(out: Outcome, sid: int) -> int:
    return sum(
        int.from_bytes(f[3], "big") for f in out.sent if f[0] == WINDOW_UPDATE and f[2] == sid
    )


@pytest.mark.parametrize("how", HOW)
def test_a_huge_message_header_gets_no_huge_grant(how: str) -> None:
    """A message announcing 256 MiB: the stream is reset (RESOURCE_EXHAUSTED), nothing granted
    (it used to get a 256 MiB WINDOW_UPDATE)."""
    conn, sid = opened()
    head = b"\x00" + u32(256 << 20) + b"x" * 100
    out = drive(conn, headers_frame(sid, [(":status", "200")]) + frame(DATA, 0, sid, head), how)
    assert out.error is None and grants(out, sid) == 0
    assert out.events[-1][:2] == (STREAM_ERROR, sid)
    assert out.events[-1][2][0] == "RESOURCE_EXHAUSTED"  # type: ignore[index]
    assert resets(out) == [(sid, ERROR_CANCEL)]


def test_overdrafts_share_one_budget_per_connection() -> None:
    window, budget = 1_000, 50_000
    conn = ClientConnection(stream_window=window, max_overdraft_bytes=budget)
    conn.data_to_send()
    a, b = conn.start_call(b"", b""), conn.start_call(b"", b"")
    big = grpc_message(bytes(40_000))
    conn.receive(frame(DATA, 0, a, big[:window]))  # a waits for a 40 KB message
    assert grants(Outcome([], None, parse_frames(conn.data_to_send())), a) == len(big) - window
    conn.receive(frame(DATA, 0, b, big[:window]))  # so does b: the budget has 10 KB left
    assert grants(Outcome([], None, parse_frames(conn.data_to_send())), b) == 0
    assert conn.credit.overdraft <= budget
    [(kind, _, box)] = conn.receive(data_frames(a, big[window:]))
    assert kind == MESSAGES and [len(m) for m in box] == [40_000]  # type: ignore[attr-defined]
    assert conn.data_to_send() == b""  # a's message is here but not consumed: b still waits
    conn.consumed(a, len(big))  # a's overdraft comes back: b is admitted
    sent = Outcome([], None, parse_frames(conn.data_to_send()))
    assert grants(sent, b) == len(big) - window and grants(sent, a) == window
    [(kind, _, box)] = conn.receive(data_frames(b, big[window:]))
    assert kind == MESSAGES


def test_a_closed_stream_returns_its_overdraft() -> None:
    conn = ClientConnection(stream_window=1_000, max_overdraft_bytes=50_000)
    conn.data_to_send()
    a, b = conn.start_call(b"", b""), conn.start_call(b"", b"")
    big = grpc_message(bytes(40_000))
    conn.receive(frame(DATA, 0, a, big[:1_000]) + frame(DATA, 0, b, big[:1_000]))
    conn.data_to_send()
    assert conn.credit.overdraft == len(big) - 1_000
    conn.cancel(a)
    sent = Outcome([], None, parse_frames(conn.data_to_send()))
    assert grants(sent, b) == len(big) - 1_000  # b got the budget a left
    assert conn.credit.overdraft == len(big) - 1_000


def test_goaway_debug_data_is_cut_for_the_log() -> None:
    conn, _ = opened()
    [(_, _, detail)] = conn.receive(frame(GOAWAY_FRAME, 0, 0, u32(1) + u32(0) + b"d" * 10_000))
    assert isinstance(detail, str) and len(detail) < 250


def test_settings_ack_is_owed_once_per_frame_however_many_entries() -> None:
    conn, sid = opened()
    many = [(SETTINGS_INITIAL_WINDOW_SIZE, 1_000 + i) for i in range(2_000)]
    conn.receive(server_settings(*many))
    assert conn.streams[sid].send_window == 2_999 - len(grpc_message(b"request"))
    assert [f[:2] for f in parse_frames(conn.data_to_send())] == [(SETTINGS, FLAG_ACK)]
