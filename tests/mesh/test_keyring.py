"""The cluster keyring: AES-256-GCM under HKDF-derived keys; the primary seals, every key opens."""

from __future__ import annotations

import itertools

import pytest

from smg.mesh.codec import CodecError, FrameDecoder, decode_packet, encode_frame, encode_packet
from smg.mesh.config import is_loopback
from smg.mesh.keyring import MAX_KEYS, SEAL_OVERHEAD, Keyring
from smg.mesh.messages import Alive, DocUpdate

OLD, NEW, WRONG = "old-cluster-key-0123", "new-cluster-key-4567", "wrong-cluster-key-89"
RECORD = b'{"url": "http://10.1.2.3:8000", "api_key": "sk-worker-secret"}'


def test_seal_and_open_round_trip_with_fresh_nonces() -> None:
    ring = Keyring(OLD)
    a, b = ring.seal(b"aad", RECORD), ring.seal(b"aad", RECORD)
    assert a != b  # a random nonce per message
    assert len(a) == len(RECORD) + SEAL_OVERHEAD
    assert ring.open(b"aad", a) == ring.open(b"aad", b) == RECORD
    assert b"10.1.2.3" not in a and b"sk-worker" not in a


def test_associated_data_and_every_bit_are_authenticated() -> None:
    ring = Keyring(OLD)
    sealed = ring.seal(b"p", RECORD)
    assert ring.open(b"f", sealed) is None  # a datagram is not a frame
    for i in range(len(sealed)):
        tampered = bytearray(sealed)
        tampered[i] ^= 0x40
        assert ring.open(b"p", bytes(tampered)) is None
    assert ring.open(b"p", sealed[: SEAL_OVERHEAD - 1]) is None


def test_rotation_steps_keep_every_pair_of_nodes_talking() -> None:
    """memberlist's procedure: add the new key as secondary, make it primary, drop the old."""
    steps = [
        [Keyring(OLD)],
        [Keyring(OLD, [NEW])],
        [Keyring(NEW, [OLD])],
        [Keyring(NEW)],
    ]
    # during a rolling restart, nodes of two consecutive steps coexist
    for before, after in itertools.pairwise(steps):
        for x in before + after:
            for y in before + after:
                assert y.open(b"p", x.seal(b"p", RECORD)) == RECORD
    # skipping a step splits the cluster: that is why there are three
    assert Keyring(OLD).open(b"p", Keyring(NEW, [OLD]).seal(b"p", RECORD)) is None
    assert Keyring(WRONG).open(b"p", Keyring(OLD).seal(b"p", RECORD)) is None


def test_sub_keys_differ_by_purpose_and_secrets_never_show() -> None:
    ring = Keyring(OLD, [NEW])
    assert ring.derive(b"a") != ring.derive(b"b") and len(ring.derive(b"a")) == 32
    assert ring.derive(b"a") == Keyring(OLD).derive(b"a")  # from the primary only
    assert OLD not in repr(ring) and NEW not in repr(ring)
    with pytest.raises(ValueError):
        Keyring(OLD, [f"{OLD}-{i}" for i in range(MAX_KEYS)])
    with pytest.raises(ValueError):
        Keyring("")


def test_codec_with_a_ring_reads_both_keys_and_writes_the_primary() -> None:
    msg = Alive("n@1", "127.0.0.1:1", 3)
    rotating = Keyring(NEW, [OLD])
    assert decode_packet(encode_packet(msg, Keyring(OLD)), rotating) == msg
    assert decode_packet(encode_packet(msg, Keyring(NEW)), rotating) == msg
    assert decode_packet(encode_packet(msg, rotating), Keyring(NEW)) == msg
    with pytest.raises(CodecError) as err:
        decode_packet(encode_packet(msg, rotating), Keyring(OLD))
    assert err.value.reason == "bad_mac"
    frame = encode_frame(DocUpdate("workers", RECORD), rotating)
    assert RECORD not in frame and b"workers" not in frame
    assert FrameDecoder(Keyring(OLD, [NEW])).feed(frame) == [DocUpdate("workers", RECORD)]


def test_a_packet_cannot_be_replayed_as_a_frame_body() -> None:
    ring = Keyring(OLD)
    packet = encode_packet(Alive("n@1", "127.0.0.1:1", 3), ring)
    with pytest.raises(CodecError) as err:
        FrameDecoder(ring).feed(len(packet).to_bytes(4, "big") + packet)
    assert err.value.reason == "bad_mac"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.9", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("gateway.internal", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
