"""The cluster keyring: authenticated encryption of every mesh packet and stream frame.

Cipher: AES-256-GCM from `cryptography` (hardware AES; ~1 us per 1400-byte packet here, less than
the HMAC-SHA256 it replaces). Each configured secret becomes a 256-bit key through HKDF-SHA256
(fixed salt and info naming this protocol, so the same secret used elsewhere yields a different
key). Every message gets a fresh random 96-bit nonce from the OS CSPRNG, never from an injected
`random.Random`; the caller binds the version byte and the channel (datagram or stream frame) in
as associated data, so a datagram cannot be replayed as a frame or under another wire version.
Overhead: 12 bytes of nonce and 16 of tag per message (`SEAL_OVERHEAD`).

Keyring (memberlist's): the primary key encrypts, every key in the ring is tried to decrypt, the
primary first. A cluster rotates without splitting in three rolling restarts:

1. add the new key as a secondary everywhere (``--cluster-key OLD --cluster-key-secondary NEW``);
2. make it the primary everywhere (``--cluster-key NEW --cluster-key-secondary OLD``);
3. drop the old key (``--cluster-key NEW``).

At every moment of that sequence each node can read what every other node sends.

Nonce budget: random 96-bit nonces collide with probability about q^2 / 2^97 after q messages
under one key. A node sends ~20 packets/s on the LAN profile; 100 nodes for a year send q ~ 2^36
(~3e-8). Rotate yearly, or sooner for larger clusters; the keyring makes that routine.

Why encryption with a keyring and not mutual TLS (as the Rust gateway's gRPC mesh uses): SWIM's
probes and gossip are UDP datagrams, and TLS needs a reliable ordered stream (DTLS is not in
`ssl` nor in `cryptography`). One sealing scheme for both channels keeps one key and one rotation
story; per-node identity, which TLS would bring, comes from the per-boot signing keys of
`identity.py` where it matters (who may write which replicated key).

Replays: there is no freshness window. Everything a replay can trigger is idempotent or bounded
by what the original triggered: membership updates are ordered by incarnation (a replayed
Alive/Suspect/Dead/Leave is stale or a no-op once the subject refuted), a replayed Ack or Nack
names a sequence number nobody waits for, a replayed Ping or PingReq draws one Ack, Ping or Nack
(reflection without amplification: see `SwimNode`, which piggybacks gossip only to known
members), and a replayed Join, PushPull or DocVector makes us push state to the member named
inside the authenticated message, never to the replayer. Replicated-document updates are CRDT
updates: applying one twice is a no-op. A freshness window would need synchronized clocks for
the mesh to work at all, and a replay cache sized for the window; neither buys more than this.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
SEAL_OVERHEAD: Final = NONCE_BYTES + TAG_BYTES
MIN_SECRET_CHARS: Final = 16
MAX_KEYS: Final = 8  # a ring is a rotation in progress, not an archive: bounds trial decryption
_SALT: Final = b"smg-mesh-keyring-v2"
_AEAD_INFO: Final = b"smg mesh aes-256-gcm"


def derive(secret: str | bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 of `secret` for one purpose (`info`)."""
    material = secret.encode() if isinstance(secret, str) else secret
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_SALT, info=info).derive(material)


class Keyring:
    """A primary secret (encrypts) and secondary secrets (also tried to decrypt)."""

    __slots__ = ("_aeads", "_primary_secret")

    def __init__(self, primary: str | bytes, secondary: Sequence[str | bytes] = ()) -> None:
        secrets = list(dict.fromkeys([primary, *secondary]))
        if len(secrets) > MAX_KEYS:
            raise ValueError(f"a keyring holds at most {MAX_KEYS} keys")
        if any(not s for s in secrets):
            raise ValueError("a cluster key must not be empty")
        self._primary_secret = primary
        self._aeads = tuple(AESGCM(derive(s, _AEAD_INFO)) for s in secrets)

    def __len__(self) -> int:
        return len(self._aeads)

    def __repr__(self) -> str:  # never the secrets
        return f"Keyring({len(self._aeads)} keys)"

    def seal(self, aad: bytes, plaintext: bytes) -> bytes:
        """nonce + ciphertext + tag under the primary key."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aeads[0].encrypt(nonce, plaintext, aad)

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        """The plaintext, or None when no key of the ring authenticates `sealed`."""
        if len(sealed) < SEAL_OVERHEAD:
            return None
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        for aead in self._aeads:
            try:
                return aead.decrypt(nonce, body, aad)
            except InvalidTag:
                continue
        return None

    def derive(self, info: bytes, length: int = 32) -> bytes:
        """A sub-key of the primary secret for another purpose (e.g. keyed summary hashes)."""
        return derive(self._primary_secret, info, length)
