"""A node's per-boot identity: an Ed25519 key pair whose public key is named by the node id.

Node ids are self-certifying: ``name@epoch.fingerprint`` where the fingerprint is the first 80
bits of SHA-256 over the public key (base32, 16 characters). Whoever can sign for a fingerprint
holds the private key of that boot; a peer needs no table of bindings ("first binding wins"
races, predictable ids claimed ahead of time) and a value relayed through third nodes verifies
the same as one received from its owner. Forging a binding means finding a key pair whose hash
matches 80 given bits: ~2^80 work.

Replicated values are signed envelopes (`seal_value` / `open_value`)::

    version:1  public_key:32  signature:64  payload

The signature covers the namespace, the document generation, the Yjs id (client, clock) of the
item that carries the value, the full key and the payload. Binding the item id means a captured
value cannot be replayed anywhere else: not under another key, not in another generation, not at
another position of the owner's Yjs history (which would let a forger squat the owner's future
clocks). Each owner's Yjs client id is derived from its public key, the namespace and the
generation (`client_id_for`), so a client id, too, names exactly one owner.

An empty payload is a tombstone: owners "delete" a key by writing one, because a Yjs delete
carries no signature and so cannot be told apart from a forged one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import struct
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ENVELOPE_VERSION: Final = 1
PUBLIC_KEY_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64
HEADER_BYTES: Final = 1 + PUBLIC_KEY_BYTES + SIGNATURE_BYTES
FINGERPRINT_CHARS: Final = 16
MAX_CLIENT_ID: Final = 2**53 - 1  # Yjs client ids must survive a JS number
_SIGNED_DOMAIN: Final = b"smg-mesh-value-v1\x00"
_CLIENT_DOMAIN: Final = b"smg-mesh-client-v1\x00"


def fingerprint(public_key: bytes) -> str:
    digest = hashlib.sha256(public_key).digest()[:10]
    return base64.b32encode(digest).decode().lower()


def fingerprint_of(node_id: str) -> str | None:
    """The fingerprint a node id claims (after its last '.'), or None."""
    _, sep, tail = node_id.rpartition(".")
    return tail if sep and len(tail) == FINGERPRINT_CHARS else None


def client_id_for(public_key: bytes, namespace: str, generation: int) -> int:
    """The owner's Yjs client id in one document generation: fresh every boot and generation,
    and tied to the key pair, so no one else can write under it."""
    h = hashlib.sha256(
        _CLIENT_DOMAIN + public_key + struct.pack(">Q", generation) + namespace.encode()
    ).digest()
    return 1 + int.from_bytes(h[:8], "big") % MAX_CLIENT_ID


def _signed_bytes(
    namespace: str, generation: int, client: int, clock: int, key: str, payload: bytes
) -> bytes:
    ns, k = namespace.encode(), key.encode()
    return b"".join(
        (
            _SIGNED_DOMAIN,
            struct.pack(">QQQII", generation, client, clock, len(ns), len(k)),
            ns,
            k,
            payload,
        )
    )


@dataclass(frozen=True, slots=True)
class Envelope:
    public_key: bytes
    signature: bytes
    payload: bytes

    @property
    def tombstone(self) -> bool:
        return not self.payload


def open_value(raw: bytes) -> Envelope | None:
    """The parts of a sealed value (not yet verified), or None if it is not one."""
    if len(raw) < HEADER_BYTES or raw[0] != ENVELOPE_VERSION:
        return None
    sig_at = 1 + PUBLIC_KEY_BYTES
    return Envelope(raw[1:sig_at], raw[sig_at:HEADER_BYTES], raw[HEADER_BYTES:])


def payload_of(raw: bytes) -> bytes:
    """The payload of a value already verified (cheap: a slice)."""
    return raw[HEADER_BYTES:]


def verify(
    env: Envelope,
    owner: str,
    namespace: str,
    generation: int,
    client: int,
    clock: int,
    key: str,
) -> bool:
    """Was `env` signed by `owner`'s key pair for exactly this item of this document?"""
    if fingerprint(env.public_key) != fingerprint_of(owner):
        return False
    if client != client_id_for(env.public_key, namespace, generation):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(env.public_key).verify(
            env.signature, _signed_bytes(namespace, generation, client, clock, key, env.payload)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


class NodeIdentity:
    """This boot's key pair and the self-certifying node id derived from it."""

    __slots__ = ("_private", "node_id", "public_key")

    def __init__(self, name_epoch: str, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public_key = private.public_key().public_bytes_raw()
        self.node_id = f"{name_epoch}.{fingerprint(self.public_key)}"

    @classmethod
    def generate(cls, name_epoch: str, rng: random.Random | None = None) -> NodeIdentity:
        """A fresh key pair (from the OS CSPRNG; a seeded `rng` only in simulations)."""
        seed = os.urandom(32) if rng is None else rng.getrandbits(256).to_bytes(32, "big")
        return cls(name_epoch, Ed25519PrivateKey.from_private_bytes(seed))

    def __repr__(self) -> str:
        return f"NodeIdentity({self.node_id!r})"

    def client_id(self, namespace: str, generation: int) -> int:
        return client_id_for(self.public_key, namespace, generation)

    def seal_value(
        self, namespace: str, generation: int, client: int, clock: int, key: str, payload: bytes
    ) -> bytes:
        signed = _signed_bytes(namespace, generation, client, clock, key, payload)
        return bytes((ENVELOPE_VERSION,)) + self.public_key + self._private.sign(signed) + payload
