import random
import struct
import tracemalloc

import msgpack
import pytest

from smg.mesh.codec import (
    MAX_COMPOUND_PARTS,
    SEAL_BYTES,
    CodecError,
    FrameDecoder,
    decode_packet,
    encode_frame,
    encode_packet,
    encoded_size,
)
from smg.mesh.keyring import Keyring
from smg.mesh.messages import (
    Ack,
    Alive,
    Compound,
    Dead,
    DocUpdate,
    DocVector,
    Join,
    Leave,
    Message,
    Nack,
    Ping,
    PingReq,
    PushPull,
    StateSync,
    StreamMessage,
    Suspect,
    Update,
    approx_size,
)

KEY = Keyring("cluster-secret-0123456789abcdef")
OTHER_KEY = Keyring("another-cluster-secret")


def _node(i: int) -> str:
    return f"node-{chr(ord('a') + i % 26)}@{0x1F2E3D4C + i:08x}"


def _addr(i: int) -> str:
    return f"127.0.0.{12 + i % 200}:{39527 + i}"


def _updates(n: int) -> tuple[Update, ...]:
    kinds: list[Update] = []
    for i in range(n):
        match i % 4:
            case 0:
                kinds.append(Alive(_node(i), _addr(i), i * 7))
            case 1:
                kinds.append(Suspect(_node(i), i, _node(i + 1)))
            case 2:
                kinds.append(Dead(_node(i), 2**40 + i, _node(i + 2)))
            case _:
                kinds.append(Leave(_node(i), i))
    return tuple(kinds)


def _realistic_compound() -> Compound:
    updates: list[Message] = []
    for i in range(8):
        if i % 2:
            updates.append(Suspect(_node(i), 3 + i, _node(i + 1)))
        else:
            updates.append(Alive(_node(i), _addr(i), 3 + i))
    return Compound((Ping(123_456, _node(9)), *updates))


PACKETS: list[Message] = [
    Ping(0, ""),
    Ping(2**64 - 1, "node-a@1f2e3d4c"),
    PingReq(17, "node-b@1f2e3d4d", "127.0.0.13:39528"),
    Ack(1),
    Nack(2**32),
    Alive("node-a@1f2e3d4c", "127.0.0.12:39527", 0),
    Suspect("node-a@1f2e3d4c", 5, "node-b@1f2e3d4d"),
    Dead("node-a@1f2e3d4c", 6, "node-c@1f2e3d4e"),
    Leave("nöde-ü@λ", 9),
    Join("node-z@00000000", "[::1]:7946", 1),
    StateSync(()),
    StateSync(_updates(200)),
    Compound(()),
    Compound((Ack(3), StateSync(_updates(5)))),
    _realistic_compound(),
]

STREAMS: list[StreamMessage] = [
    PushPull("node-a@1f2e3d4c", "127.0.0.12:39527", (), False),
    PushPull("node-a@1f2e3d4c", "127.0.0.12:39527", _updates(1000), True),
    DocVector("workers", b"", True),
    DocVector("workers", bytes(range(256)) * 3, False),
    DocUpdate("cache/ü", b"\x00\xff\x01\xc1" * 5000),
    DocUpdate("", b""),
]


# --- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("msg", PACKETS, ids=lambda m: type(m).__name__)
def test_packet_round_trip(msg: Message, key: Keyring | None) -> None:
    data = encode_packet(msg, key)
    assert decode_packet(data, key) == msg
    assert len(data) == encoded_size(msg) + (SEAL_BYTES if key else 0)


@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("msg", STREAMS, ids=lambda m: type(m).__name__)
def test_frame_round_trip(msg: StreamMessage, key: Keyring | None) -> None:
    frame = encode_frame(msg, key)
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    assert FrameDecoder(key).feed(frame) == [msg]


def test_decoded_fields_have_exact_types() -> None:
    msg = decode_packet(encode_packet(StateSync(_updates(8)), None), None)
    assert isinstance(msg, StateSync)
    assert type(msg.updates) is tuple
    decoded = FrameDecoder(None).feed(encode_frame(DocUpdate("ns", b"\x01"), None))[0]
    assert isinstance(decoded, DocUpdate)
    assert type(decoded.update) is bytes


def test_encoder_rejects_our_own_bad_messages() -> None:
    for bad in (
        Ping(-1, "x"),
        Ack(2**64),
        Compound((Compound(()),)),
        Compound(tuple(Ack(i) for i in range(MAX_COMPOUND_PARTS + 1))),
        StateSync((Ping(1, "x"),)),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError):
            encode_packet(bad, None)
    with pytest.raises(ValueError):
        encode_packet(DocUpdate("ns", b""), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_frame(Ack(1), None)  # type: ignore[arg-type]


# --- keys --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("send_key", "recv_key"), [(KEY, OTHER_KEY), (None, KEY), (KEY, None), (OTHER_KEY, KEY)]
)
def test_key_mismatch_is_bad_mac(send_key: Keyring | None, recv_key: Keyring | None) -> None:
    for msg in PACKETS:
        with pytest.raises(CodecError) as err:
            decode_packet(encode_packet(msg, send_key), recv_key)
        assert err.value.reason == "bad_mac"
    with pytest.raises(CodecError) as err:
        FrameDecoder(recv_key).feed(encode_frame(STREAMS[1], send_key))
    assert err.value.reason == "bad_mac"


def test_tampered_payload_is_bad_mac() -> None:
    data = bytearray(encode_packet(Alive("node-a", "127.0.0.1:1", 4), KEY))
    data[-1] ^= 0x01
    with pytest.raises(CodecError) as err:
        decode_packet(bytes(data), KEY)
    assert err.value.reason == "bad_mac"


@pytest.mark.parametrize("version", [0x00, 0x01, 0x03, 0x7F, 0x80 | 0x01, 0xFF])
def test_unknown_version(version: int) -> None:
    data = bytearray(encode_packet(Ack(1), None))
    data[0] = version
    with pytest.raises(CodecError) as err:
        decode_packet(bytes(data), None)
    assert err.value.reason == "bad_version"


# --- malformed input ---------------------------------------------------------------------------
def _raw(obj: object) -> bytes:
    return b"\x02" + msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(
    "obj",
    [
        [1, "7", "node"],  # str where an int is expected
        [1, True, "node"],  # bool where an int is expected
        [1, 1.0, "node"],  # float where an int is expected
        [1, -1, "node"],  # negative seq
        [5, "n", "a", -3],  # negative incarnation
        [1, 7, b"node"],  # bytes where a str is expected
        [1, 7],  # too few fields
        [1, 7, "node", 0],  # too many fields
        [99, 1],  # unknown tag
        [20, "n", "a", [], False],  # a stream message in a packet
        [True, 7],  # bool tag
        [],
        "ping",
        {"seq": 1},
        None,
        [10, [[1, 7, "x"]]],  # a Ping is not an update
        [10, [[5, "n", "a"]]],  # short update
        [10, "nope"],
        [11, [[11, []]]],  # nested Compound
        [11, [[1, 1, "x"]] * (MAX_COMPOUND_PARTS + 1)],  # too many parts
        [11, [1, 1, "x"]],  # parts not arrays
        [11],
        [[[[[[[[[[]]]]]]]]]],  # deep nesting
    ],
)
def test_malformed_packets(obj: object) -> None:
    with pytest.raises(CodecError) as err:
        decode_packet(_raw(obj), None)
    assert err.value.reason == "malformed"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x02",
        b"\x02\xc1",  # never-used msgpack byte
        b"\x02\x93\x01\x07\xa4no",  # truncated str
        b"\x02\x92\x03\x01\x00",  # trailing bytes
        b"\x02\x92\x01\xa2\xff\xfe",  # invalid UTF-8
        b"\x02\xdd\xff\xff\xff\xff",  # array32 claiming 4 billion items
        b"\x02\x92\x03\xd4\x01\x00",  # ext type
        b"\x02" + b"\x91" * 5000 + b"\x90",  # very deep nesting
    ],
)
def test_malformed_bytes(data: bytes) -> None:
    with pytest.raises(CodecError) as err:
        decode_packet(data, None)
    assert err.value.reason == "malformed"


def test_stream_malformed_payloads() -> None:
    for obj in ([21, "ns", "not bytes", True], [21, "ns", b"", 1], [22, "ns"], [1, 7, "x"]):
        body = _raw(obj)
        with pytest.raises(CodecError) as err:
            FrameDecoder(None).feed(struct.pack(">I", len(body)) + body)
        assert err.value.reason == "malformed"


def test_packet_too_large() -> None:
    data = encode_packet(StateSync(_updates(50)), None)
    with pytest.raises(CodecError) as err:
        decode_packet(data, None, max_bytes=len(data) - 1)
    assert err.value.reason == "too_large"
    assert decode_packet(data, None, max_bytes=len(data)) == StateSync(_updates(50))


@pytest.mark.parametrize("key", [None, KEY])
def test_truncation_at_every_offset(key: Keyring | None) -> None:
    for msg in (_realistic_compound(), PingReq(1, "node-b", "127.0.0.1:2"), StateSync(_updates(9))):
        data = encode_packet(msg, key)
        for cut in range(len(data)):
            with pytest.raises(CodecError):
                decode_packet(data[:cut], key)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 1 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif op == 2:
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif buf:
            i = rng.randrange(len(buf))
            del buf[i : i + rng.randint(1, 8)]
    return bytes(buf)


def _seal(payload: bytes) -> bytes:
    version = b"\x82"  # wire version 2 with the keyed flag
    return version + KEY.seal(version + b"p", payload)


@pytest.mark.parametrize("keyed", [False, True])
def test_fuzz_packets_only_raise_codec_error(keyed: bool) -> None:
    """Random and mutated payloads; when keyed, mutants are re-encrypted to reach the parser."""
    key = KEY if keyed else None
    rng = random.Random(20240611)
    payloads = [encode_packet(m, None)[1:] for m in PACKETS if encoded_size(m) < 4000]
    decoded = 0
    for i in range(6000):
        if i % 3 == 0:
            payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        else:
            payload = _mutate(rng, rng.choice(payloads))
        data = _seal(payload) if keyed else b"\x02" + payload
        if i % 5 == 0:
            data = _mutate(rng, data)  # also hit the version byte, the nonce and the tag
        try:
            msg = decode_packet(data, key)
        except CodecError as err:
            assert err.reason in {"too_large", "bad_mac", "bad_version", "malformed"}
        else:
            decoded += 1
            assert decode_packet(encode_packet(msg, key), key) == msg
    assert decoded > 20  # some mutants survive: they do reach every layer


def test_fuzz_frames_only_raise_codec_error() -> None:
    rng = random.Random(7)
    stream = b"".join(encode_frame(m, None) for m in STREAMS[:4])
    for _ in range(300):
        data = _mutate(rng, stream)
        decoder = FrameDecoder(None, max_frame_bytes=1 << 20)
        try:
            pos = 0
            while pos < len(data):
                step = rng.randint(1, 512)
                decoder.feed(data[pos : pos + step])
                pos += step
        except CodecError:
            pass


# --- the frame decoder -------------------------------------------------------------------------
@pytest.mark.parametrize("key", [None, KEY])
def test_frame_decoder_chunk_invariance(key: Keyring | None) -> None:
    stream = b"".join(encode_frame(m, key) for m in STREAMS[:4] + STREAMS[5:])
    expected = STREAMS[:4] + STREAMS[5:]

    whole = FrameDecoder(key)
    assert whole.feed(stream) == expected

    one = FrameDecoder(key)
    got: list[StreamMessage] = []
    for i in range(len(stream)):
        got += one.feed(stream[i : i + 1])
    assert got == expected
    assert one.buffered_bytes == 0

    rng = random.Random(3)
    chunked = FrameDecoder(key)
    got, pos = [], 0
    while pos < len(stream):
        step = rng.randint(0, 700)
        got += chunked.feed(stream[pos : pos + step])
        pos += step
    assert got == expected


def test_frame_decoder_holds_partial_frame() -> None:
    frame = encode_frame(DocUpdate("ns", b"abc"), None)
    decoder = FrameDecoder(None)
    assert decoder.feed(frame + frame[:5]) == [DocUpdate("ns", b"abc")]
    assert decoder.buffered_bytes == 5
    assert decoder.feed(frame[5:]) == [DocUpdate("ns", b"abc")]
    assert decoder.buffered_bytes == 0


def test_oversized_length_prefix_rejected_without_allocation() -> None:
    decoder = FrameDecoder(None, max_frame_bytes=8 * 1024 * 1024)
    tracemalloc.start()
    try:
        assert decoder.feed(b"\xff\xff") == []
        with pytest.raises(CodecError) as err:
            decoder.feed(b"\xff\xf0")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.reason == "too_large"
    assert peak < 64 * 1024
    with pytest.raises(CodecError):  # the stream stays failed
        decoder.feed(encode_frame(DocUpdate("ns", b""), None))


def test_frame_limit_is_inclusive() -> None:
    frame = encode_frame(DocUpdate("ns", b"x" * 100), None)
    assert FrameDecoder(None, max_frame_bytes=len(frame) - 4).feed(frame) != []
    with pytest.raises(CodecError) as err:
        FrameDecoder(None, max_frame_bytes=len(frame) - 5).feed(frame[:4])
    assert err.value.reason == "too_large"


def test_bad_version_and_empty_frame() -> None:
    with pytest.raises(CodecError) as err:
        FrameDecoder(None).feed(b"\x00\x00\x00\x02\x09\x90")
    assert err.value.reason == "bad_version"
    with pytest.raises(CodecError) as err:
        FrameDecoder(None).feed(b"\x00\x00\x00\x00")
    assert err.value.reason == "malformed"


# --- sizes -------------------------------------------------------------------------------------
def test_realistic_compound_fits_in_one_datagram() -> None:
    msg = _realistic_compound()
    data = encode_packet(msg, KEY)
    assert len(data) == encoded_size(msg) + SEAL_BYTES
    assert len(data) < 1400


def test_known_sizes() -> None:
    # version + fixarray + tag + uint32 seq + fixstr header + 15 chars
    assert encoded_size(Ping(123_456, "node-a@1f2e3d4c")) == 1 + 1 + 1 + 5 + 1 + 15
    # version + fixarray + tag + 2 * (header + text) + fixint incarnation
    assert encoded_size(Alive("node-a@1f2e3d4c", "127.0.0.12:39527", 3)) == 3 + 16 + 17 + 1


@pytest.mark.parametrize(
    "msg",
    [
        Ping(123_456, "node-a@1f2e3d4c"),
        Ping(2**32 - 1, "node-a@1f2e3d4c"),
        PingReq(9, "node-a@1f2e3d4c", "127.0.0.12:39527"),
        Ack(2**32 - 1),
        Nack(0),
        Alive("node-a@1f2e3d4c", "127.0.0.12:39527", 2**32 - 1),
        Suspect("node-a@1f2e3d4c", 7, "node-b@1f2e3d4d"),
        Dead("node-a@1f2e3d4c", 7, "node-b@1f2e3d4d"),
        Leave("node-a@1f2e3d4c", 7),
        Join("node-a@1f2e3d4c", "127.0.0.12:39527", 0),
        StateSync(_updates(40)),
        _realistic_compound(),
        Compound((Ack(1), *_updates(20))),
    ],
    ids=lambda m: type(m).__name__,
)
def test_approx_size_is_an_upper_bound(msg: Message) -> None:
    assert encoded_size(msg) <= approx_size(msg)


@pytest.mark.parametrize(
    "msg",
    [
        Ack(2**32),  # uint64 seq: 12 bytes vs 8
        Ping(2**32, "node-a@1f2e3d4c"),  # 28 vs 27
        Dead("node-a@1f2e3d4c", 2**40, "node-b@1f2e3d4d"),  # 44 vs 42
        Leave("ü" * 10, 1),  # len() counts characters, the wire UTF-8 bytes: 25 vs 22
    ],
    ids=lambda m: type(m).__name__,
)
def test_approx_size_bounds_wide_ints_and_utf8(msg: Message) -> None:
    assert encoded_size(msg) <= approx_size(msg)
