"""The lean gRPC data path's pure parts: HPACK and the sans-IO HTTP/2 client connection.

The server side is bytes built here; each scenario is fed whole, one byte at a time and in random
chunks, and must give the same events."""

from __future__ import annotations

import itertools
import random

import pytest

from smg.pipeline.backends import hpack
from smg.pipeline.backends.h2_client import (
    END,
    GOAWAY,
    HEADERS,
    MESSAGES,
    PING_ACK,
    RESET,
    ClientConnection,
    Event,
    H2ProtocolError,
)
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    PING,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    WINDOW_UPDATE,
    frame,
)

# --- HPACK -------------------------------------------------------------------------------------

HUFFMAN_EXAMPLES = {  # RFC 7541 C.4 and C.6
    "www.example.com": "f1e3c2e5f23a6ba0ab90f4ff",
    "no-cache": "a8eb10649cbf",
    "custom-key": "25a849e95ba97d7f",
    "custom-value": "25a849e95bb8e8b4bf",
    "302": "6402",
    "private": "aec3771a4b",
    "Mon, 21 Oct 2013 20:13:21 GMT": "d07abe941054d444a8200595040b8166e082a62d1bff",
    "https://www.example.com": "9d29ad171863c78f0b97c8e9ae82ae43d3",
}


@pytest.mark.parametrize(("text", "hexed"), HUFFMAN_EXAMPLES.items())
def test_huffman_rfc_examples(text: str, hexed: str) -> None:
    assert hpack.huffman_encode(text.encode()).hex() == hexed
    assert hpack.huffman_decode(bytes.fromhex(hexed)) == text.encode()


def test_huffman_code_is_complete_and_round_trips_every_byte() -> None:
    codes = hpack.huffman_codes()
    assert sum(2.0**-length for _, length in codes) == 1.0  # a complete prefix code
    assert codes[hpack.EOS] == (0x3FFFFFFF, 30)
    data = bytes(range(256)) * 2
    assert hpack.huffman_decode(hpack.huffman_encode(data)) == data


def test_huffman_rejects_bad_padding_and_eos() -> None:
    with pytest.raises(hpack.HpackError):
        hpack.huffman_decode(b"\x18")  # "a" (00011) then zero padding
    with pytest.raises(hpack.HpackError):
        hpack.huffman_decode(b"\xff\xff\xff\xff")  # EOS


def test_decoder_rfc_request_sequence_with_dynamic_table() -> None:
    d = hpack.Decoder()
    assert d.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]
    assert d.decode(bytes.fromhex("828684be5886a8eb10649cbf"))[-1] == ("cache-control", "no-cache")
    assert d.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))[-1] == (
        "custom-key",
        "custom-value",
    )


def test_decoder_rfc_responses_with_eviction() -> None:
    d = hpack.Decoder(256)
    first = d.decode(
        bytes.fromhex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
            "6e919d29ad171863c78f0b97c8e9ae82ae43d3"
        )
    )
    assert first[0] == (":status", "302")
    assert d.decode(bytes.fromhex("4883640effc1c0bf"))[0] == (":status", "307")
    assert d._size == 222  # RFC 7541 C.6.2: one entry evicted


@pytest.mark.parametrize("bad", ["80", "be", "3fe21f", "0f", "0005616263"])
def test_decoder_errors_are_hpack_errors(bad: str) -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder(4096).decode(bytes.fromhex(bad))


def test_encode_round_trip_and_integers() -> None:
    headers = [(":path", "/a.B/Generate"), ("grpc-timeout", "5000m"), ("x" * 300, "y" * 200)]
    assert hpack.Decoder().decode(hpack.encode(headers)) == headers
    for value in (0, 14, 15, 16, 127, 128, 1337, 2**20):
        encoded = hpack.encode_int(value, 4)
        assert hpack._decode_int(encoded, 0, 4) == (value, len(encoded))


# --- the HTTP/2 client connection ----------------------------------------------------------------


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def headers_frame(sid: int, headers: list[tuple[str, str]], *, end: bool = False) -> bytes:
    flags = FLAG_END_HEADERS | (FLAG_END_STREAM if end else 0)
    return frame(HEADERS_FRAME, flags, sid, hpack.encode(headers))


def server_settings(*pairs: tuple[int, int]) -> bytes:
    body = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in pairs)
    return frame(SETTINGS, 0, 0, body)


def parse_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    assert data.startswith(PREFACE) or not data.startswith(b"PRI")
    if data.startswith(PREFACE):
        data = data[len(PREFACE) :]
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big")
        out.append((kind, flags, sid, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    assert pos == len(data)
    return out


def feed(conn: ClientConnection, data: bytes, how: str, seed: int = 0) -> list[Event]:
    events: list[Event] = []
    if how == "whole":
        return conn.receive(data)
    if how == "bytes":
        for i in range(len(data)):
            events += conn.receive(data[i : i + 1])
        return events
    rng = random.Random(seed)
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 40)
        events += conn.receive(data[pos : pos + step])
        pos += step
    return events


def messages_of(events: list[Event]) -> list[bytes]:
    """The messages in `events`, in order."""
    return [m for kind, _, box in events if kind == MESSAGES for m in box]  # type: ignore[attr-defined]


def opened(**kw: int) -> tuple[ClientConnection, int]:
    conn = ClientConnection(**kw)
    conn.data_to_send()
    sid = conn.start_call(hpack.encode([(":path", "/x")]), b"request")
    conn.data_to_send()
    return conn, sid


STREAM_BODY = [b"one", b"two" * 50, b"", b"three" * 3000]


def a_stream(sid: int) -> bytes:
    data = b"".join(grpc_message(m) for m in STREAM_BODY)
    cut = [0, 7, 9, 200, len(data)]  # messages split across DATA frames, several in one
    out = server_settings() + headers_frame(sid, [(":status", "200")])
    for a, b in itertools.pairwise(cut):
        out += frame(DATA, 0, sid, data[a:b])
    return out + headers_frame(sid, [("grpc-status", "0"), ("grpc-message", "")], end=True)


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
def test_a_stream_is_chunk_invariant(how: str) -> None:
    conn, sid = opened()
    events = feed(conn, a_stream(sid), how)
    assert events[0] == (HEADERS, sid, [(":status", "200")])
    assert messages_of(events) == STREAM_BODY
    assert events[-1] == (END, sid, [("grpc-status", "0"), ("grpc-message", "")])
    assert sid not in conn.streams
    acks = [f for f in parse_frames(conn.data_to_send()) if f[0] == SETTINGS]
    assert acks == [(SETTINGS, FLAG_ACK, 0, b"")]


def test_opening_sends_preface_settings_and_a_bigger_window() -> None:
    conn = ClientConnection(stream_window=1 << 20, connection_window=1 << 24)
    frames = parse_frames(conn.data_to_send())
    assert [f[0] for f in frames] == [SETTINGS, WINDOW_UPDATE]
    assert int.from_bytes(frames[1][3], "big") == (1 << 24) - 65_535
    sid = conn.start_call(hpack.encode([(":path", "/x")]), b"hi")
    kinds = [(f[0], f[1], f[2]) for f in parse_frames(conn.data_to_send())]
    assert kinds == [(HEADERS_FRAME, FLAG_END_HEADERS, sid), (DATA, FLAG_END_STREAM, sid)]
    assert conn.start_call(b"", b"") == sid + 2


def test_request_waits_for_send_window() -> None:
    conn = ClientConnection()
    conn.data_to_send()
    big = bytes(100_000)
    sid = conn.start_call(b"", big)
    sent = [f for f in parse_frames(conn.data_to_send()) if f[0] == DATA]
    assert sum(len(f[3]) for f in sent) == 65_535 and not any(f[1] for f in sent)
    conn.receive(frame(WINDOW_UPDATE, 0, 0, (50_000).to_bytes(4, "big")))
    assert conn.data_to_send() == b""  # the stream's own window is still spent
    conn.receive(server_settings((SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)))
    rest = [f for f in parse_frames(conn.data_to_send()) if f[0] == DATA]
    assert sum(len(f[3]) for f in rest) == len(big) + 5 - 65_535
    assert rest[-1][1] == FLAG_END_STREAM and all(f[2] == sid for f in rest)


def stream_updates(conn: ClientConnection, sid: int) -> list[int]:
    """The stream-level WINDOW_UPDATE increments `conn` has to send."""
    frames = parse_frames(conn.data_to_send())
    return [int.from_bytes(f[3], "big") for f in frames if f[0] == WINDOW_UPDATE and f[2] == sid]


def test_stream_credit_follows_consumption_in_batches() -> None:
    conn, sid = opened(stream_window=1000, connection_window=100_000)
    conn.receive(headers_frame(sid, [(":status", "200")]))
    events = conn.receive(frame(DATA, 0, sid, grpc_message(bytes(295)) * 2))  # 2 x 300 bytes
    assert [e[0] for e in events] == [MESSAGES] and len(messages_of(events)) == 2
    assert stream_updates(conn, sid) == []  # received, not consumed: no credit
    conn.consumed(sid, 300)
    assert stream_updates(conn, sid) == []  # 300 < half the window: not worth a frame yet
    conn.consumed(sid, 300)
    assert stream_updates(conn, sid) == [600]  # one frame for both
    conn.consumed(sid + 2, 50)  # a stream that is not open: ignored
    assert conn.data_to_send() == b""


def test_a_stalled_reader_stops_the_server_at_the_window() -> None:
    conn, sid = opened(stream_window=1000, connection_window=100_000)
    conn.receive(headers_frame(sid, [(":status", "200")]))
    message = grpc_message(bytes(95))
    events = conn.receive(frame(DATA, 0, sid, message * 10))  # the whole window
    assert len(messages_of(events)) == 10 and stream_updates(conn, sid) == []
    with pytest.raises(H2ProtocolError, match="flow-control window"):
        conn.receive(frame(DATA, 0, sid, message))  # one byte past it is the server's fault
    conn, sid = opened(stream_window=1000, connection_window=100_000)
    conn.receive(frame(DATA, 0, sid, message * 10))
    conn.consumed(sid, 1000)
    assert stream_updates(conn, sid) == [1000]
    assert len(messages_of(conn.receive(frame(DATA, 0, sid, message * 10)))) == 10  # reopened


def test_padding_is_credited_without_consumption() -> None:
    conn, sid = opened(stream_window=1000, connection_window=100_000)
    padded = b"\xf0" + grpc_message(b"x") + bytes(0xF0)  # 247 bytes, 6 of them a message
    conn.receive(frame(DATA, FLAG_PADDED, sid, padded) * 2)
    assert stream_updates(conn, sid) == []  # 482 bytes of padding: under half the window
    conn.receive(frame(DATA, FLAG_PADDED, sid, padded))
    assert stream_updates(conn, sid) == [723]  # 3 x (240 bytes of padding + its length byte)
    conn.consumed(sid, 18)
    assert stream_updates(conn, sid) == []


class HonestServer:
    """The server side of one stream that sends as fast as both flow-control windows allow."""

    def __init__(self, sid: int, body: list[bytes], *, stream_window: int, conn_window: int):
        self.sid = sid
        self.data = b"".join(grpc_message(m) for m in body)
        self.sent = 0
        self.stream_window = stream_window
        self.conn_window = conn_window
        self.finished = False
        self.widest = stream_window  # the largest stream window it was ever granted

    def absorb(self, client_bytes: bytes) -> None:
        for kind, _, sid, payload in parse_frames(client_bytes):
            if kind == WINDOW_UPDATE:
                inc = int.from_bytes(payload, "big")
                if sid == 0:
                    self.conn_window += inc
                else:
                    assert sid == self.sid
                    self.stream_window += inc
                    self.widest = max(self.widest, self.stream_window)

    def send(self) -> bytes:
        out = b""
        while self.sent < len(self.data):
            n = min(len(self.data) - self.sent, self.stream_window, self.conn_window, 16_384)
            if n <= 0:
                return out
            out += frame(DATA, 0, self.sid, self.data[self.sent : self.sent + n])
            self.sent += n
            self.stream_window -= n
            self.conn_window -= n
        if not self.finished:
            self.finished = True
            out += headers_frame(self.sid, [("grpc-status", "0")], end=True)
        return out


def run_stream(
    body: list[bytes], *, window: int, seed: int, read_chance: float
) -> tuple[list[bytes], HonestServer, int]:
    """Stream `body` from an honest server to a reader that consumes at random moments (and
    surely when the server is blocked); return what it read, the server, the credit frames."""
    rng = random.Random(seed)
    conn, sid = opened(stream_window=window, connection_window=1 << 20)
    server = HonestServer(sid, body, stream_window=window, conn_window=1 << 20)
    conn.receive(headers_frame(sid, [(":status", "200")]))
    read: list[bytes] = []
    unread: list[bytes] = []
    updates = 0
    ended = False
    while not ended:
        data = server.send()
        assert data or unread, "deadlock: the server is blocked and the reader has read all"
        for kind, _, value in conn.receive(data):
            if kind == MESSAGES:
                unread += value  # type: ignore[arg-type]
            ended = ended or kind == END
        stream = conn.streams.get(sid)
        if stream is not None:  # what the gateway holds: never more than one window (+ the
            held = sum(len(m) + 5 for m in unread) + len(stream.buf)  # message it waits for)
            assert held <= window + max(len(m) + 5 for m in body)
            if all(len(m) + 5 <= window // 2 for m in body):
                assert held <= window
        if unread and (not data or rng.random() < read_chance):
            conn.consumed(sid, sum(len(m) + 5 for m in unread))
            read += unread
            unread = []
        out = conn.data_to_send()
        updates += sum(1 for f in parse_frames(out) if f[0] == WINDOW_UPDATE and f[2] == sid)
        server.absorb(out)
    return read + unread, server, updates


@pytest.mark.parametrize("seed", range(8))
def test_small_messages_flow_with_batched_credit(seed: int) -> None:
    rng = random.Random(seed)
    body = [bytes([i % 256]) * rng.randint(0, 60) for i in range(2000)]
    read, server, updates = run_stream(body, window=1000, seed=seed, read_chance=0.3)
    assert read == body
    assert server.widest == 1000  # credit never ran ahead of consumption
    assert updates <= len(server.data) // 500 + 1  # one frame per half window, not per message


@pytest.mark.parametrize("seed", range(8))
def test_messages_bigger_than_the_window_complete(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [5_000, 995, 996, 499, 2_000_000, *(rng.randint(0, 3_000) for _ in range(100))]
    body = [bytes([i % 256]) * n for i, n in enumerate(sizes)]
    read, server, _ = run_stream(body, window=1000, seed=seed, read_chance=0.5)
    assert read == body
    assert server.widest <= 1000 + max(sizes) + 5  # one message's overdraft at most


def test_an_overdraft_is_paid_back_by_the_big_message() -> None:
    conn, sid = opened(stream_window=1000, connection_window=1 << 20)
    big = grpc_message(bytes(4_000))
    conn.receive(frame(DATA, 0, sid, big[:1000]))  # the window is spent, the message unfinished
    [grant] = stream_updates(conn, sid)
    assert grant == len(big) - 1000  # admit exactly the rest of it, in one frame
    [payload] = messages_of(conn.receive(frame(DATA, 0, sid, big[1000:])))
    assert len(payload) == 4_000 and stream_updates(conn, sid) == []
    conn.consumed(sid, len(big))  # repays the overdraft: the window is back to 1000
    assert stream_updates(conn, sid) == [1000]
    conn.receive(frame(DATA, 0, sid, grpc_message(bytes(995))))
    with pytest.raises(H2ProtocolError):
        conn.receive(frame(DATA, 0, sid, b"\x00"))


def test_ping_is_answered_and_our_ping_acknowledged() -> None:
    conn, _ = opened()
    assert conn.receive(frame(PING, 0, 0, b"12345678")) == []
    assert parse_frames(conn.data_to_send()) == [(PING, FLAG_ACK, 0, b"12345678")]
    conn.ping(b"abcdefgh")
    assert parse_frames(conn.data_to_send()) == [(PING, 0, 0, b"abcdefgh")]
    assert conn.receive(frame(PING, FLAG_ACK, 0, b"abcdefgh")) == [(PING_ACK, 0, b"abcdefgh")]


def test_trailers_only_reset_and_cancel() -> None:
    conn, sid = opened()
    trailers = [(":status", "200"), ("grpc-status", "5"), ("grpc-message", "no%20such")]
    assert conn.receive(headers_frame(sid, trailers, end=True)) == [
        (HEADERS, sid, trailers),
        (END, sid, trailers),
    ]
    second = conn.start_call(b"", b"")
    assert conn.receive(frame(RST_STREAM, 0, second, (2).to_bytes(4, "big"))) == [
        (RESET, second, 2)
    ]
    third = conn.start_call(b"", b"")
    conn.data_to_send()
    conn.cancel(third)
    assert parse_frames(conn.data_to_send()) == [(RST_STREAM, 0, third, (8).to_bytes(4, "big"))]
    # frames for a cancelled stream are dropped, but headers still update the HPACK state
    late = frame(HEADERS_FRAME, FLAG_END_HEADERS, third, bytes.fromhex("4001610162"))
    assert conn.receive(late + frame(DATA, 0, third, grpc_message(b"late"))) == []
    assert conn.decoder.decode(bytes.fromhex("be")) == [("a", "b")]  # ("a", "b") was indexed


def test_continuation_and_padding() -> None:
    conn, sid = opened()
    block = hpack.encode([(":status", "200"), ("x-long", "v" * 100)])
    data = frame(HEADERS_FRAME, 0, sid, block[:10]) + frame(
        CONTINUATION, FLAG_END_HEADERS, sid, block[10:]
    )
    padded = b"\x03" + grpc_message(b"hello") + b"\x00\x00\x00"
    data += frame(DATA, FLAG_PADDED, sid, padded)
    events = conn.receive(data)
    assert events == [(HEADERS, sid, [(":status", "200"), ("x-long", "v" * 100)]),
                      (MESSAGES, sid, [b"hello"])]  # fmt: skip


def test_goaway_and_stream_limit_stop_new_streams() -> None:
    conn, sid = opened()
    conn.receive(server_settings((SETTINGS_MAX_CONCURRENT_STREAMS, 1)))
    assert not conn.can_open
    payload = sid.to_bytes(4, "big") + (0).to_bytes(4, "big") + b"bye"
    conn2, _ = opened()
    events = conn2.receive(frame(GOAWAY_FRAME, 0, 0, payload))
    assert events == [(GOAWAY, sid, "GOAWAY error 0: bye")] and not conn2.can_open
    with pytest.raises(RuntimeError):
        conn2.start_call(b"", b"")


@pytest.mark.parametrize(
    "bad",
    [
        frame(DATA, 0, 0, b"x"),  # DATA on stream 0
        (20_000).to_bytes(3, "big") + bytes((DATA, 0)) + (1).to_bytes(4, "big"),  # too big
        frame(PUSH_PROMISE, FLAG_END_HEADERS, 1, bytes(4)),
        frame(PING, 0, 0, b"short"),
        frame(HEADERS_FRAME, 0, 1, b"") + frame(DATA, 0, 1, b""),  # interrupted header block
        frame(DATA, 0, 1, b"\x01\x00\x00\x00\x00"),  # a compressed message
    ],
)
def test_protocol_errors(bad: bytes) -> None:
    conn, _ = opened()
    with pytest.raises(H2ProtocolError):
        conn.receive(bad)


def test_spent_stream_ids_retire_the_connection() -> None:
    conn, _ = opened()
    conn.next_stream_id = 2**31 - 1
    conn.start_call(b"", b"")
    assert conn.goaway and not conn.can_open


# --- the DATA fast path (one whole unpadded message a frame) and the general path around it ----
MIXED = [b"a" * 20, b"b", b"two-1", b"two-2", b"split" * 10, b"padded", b"c" * 7, b"last"]


def a_mixed_stream(sid: int) -> bytes:
    one = [grpc_message(m) for m in MIXED]
    out = headers_frame(sid, [(":status", "200")])
    out += frame(DATA, 0, sid, one[0]) + frame(DATA, 0, sid, one[1])  # the fast path
    out += frame(DATA, 0, sid, one[2] + one[3])  # two messages in one frame
    out += frame(DATA, 0, sid, one[4][:12]) + frame(DATA, 0, sid, one[4][12:])  # one in two
    out += frame(DATA, FLAG_PADDED, sid, b"\x02" + one[5] + b"\x00\x00")  # padded
    out += frame(DATA, 0, sid, one[6])  # the fast path again, after the general one
    return out + frame(DATA, FLAG_END_STREAM, sid, one[7])  # a message and the end


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
def test_one_message_frames_and_the_rest_are_chunk_invariant(how: str) -> None:
    conn, sid = opened()
    events = feed(conn, a_mixed_stream(sid), how, seed=3)
    assert messages_of(events) == MIXED
    assert all(type(m) is bytes for m in messages_of(events))
    if how == "whole":  # one read: one event for the stream's messages, before its end
        assert [e[0] for e in events] == [HEADERS, MESSAGES, END]
    assert events[-1] == (END, sid, []) and sid not in conn.streams


def test_one_message_frames_count_against_both_windows() -> None:
    conn, sid = opened(stream_window=1000, connection_window=100_000)
    message = frame(DATA, 0, sid, grpc_message(bytes(95)))
    assert len(messages_of(conn.receive(message * 10))) == 10  # the stream's whole window
    assert conn.streams[sid].unread == 1000
    with pytest.raises(H2ProtocolError, match="stream 1's flow-control window"):
        conn.receive(message)
    # the connection's window: the server may use what we announced, no more, even when a
    # read would reach our next WINDOW_UPDATE (it leaves after the read)
    conn = ClientConnection(stream_window=1 << 20, connection_window=70_000)
    sids = [conn.start_call(b"", b"") for _ in range(8)]
    conn.data_to_send()
    big = [frame(DATA, 0, s, grpc_message(bytes(16_000))) for s in sids]
    assert len(conn.receive(b"".join(big[:4]))) == 4  # (an event a stream)
    updates = [f for f in parse_frames(conn.data_to_send()) if f[0] == WINDOW_UPDATE]
    assert updates == [(WINDOW_UPDATE, 0, 0, (64_020).to_bytes(4, "big"))]  # one a read
    assert len(conn.receive(b"".join(big[4:]))) == 4  # the window was refilled
    conn.data_to_send()
    with pytest.raises(H2ProtocolError, match="connection's flow-control window") as err:
        conn.receive(b"".join(big) + big[0])  # 9 frames: 1 past the 70,000 bytes
    assert len(messages_of(err.value.events)) == 4  # (4 x 16,005 fit: the 5th hits the window)


def test_a_read_hands_each_stream_its_messages_in_one_event() -> None:
    conn = ClientConnection()
    a, b = conn.start_call(b"", b""), conn.start_call(b"", b"")
    one = [
        frame(DATA, 0, sid, grpc_message(b"%d-%d" % (sid, i))) for i in range(3) for sid in (a, b)
    ]
    split = grpc_message(b"split")  # b's last message over two frames, through the general path
    data = b"".join(one) + frame(DATA, 0, b, split[:3]) + frame(DATA, 0, b, split[3:])
    assert conn.receive(data) == [
        (MESSAGES, a, [b"1-0", b"1-1", b"1-2"]),
        (MESSAGES, b, [b"3-0", b"3-1", b"3-2", b"split"]),
    ]
    assert conn.receive(one[1]) == [(MESSAGES, b, [b"3-0"])]  # the next read: a new list
