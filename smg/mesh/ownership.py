"""Ownership of replicated keys, checked on every update before it touches the document.

Threat model. Outsiders are stopped by the mandatory cluster key: every packet and frame is
encrypted and authenticated (keyring.py), and a mesh beyond loopback does not start without one.
What is left is an insider: a node that holds the cluster key and is buggy or compromised. A
shared key cannot tell insiders apart, so ownership rests on per-node identity instead: each
boot makes an Ed25519 key pair, and its node id names the public key (identity.py). Every key of
a replicated document is ``owner/subkey``; only ``owner`` may write it, and every value it
writes is signed over (namespace, generation, Yjs item id, key, payload).

Why check updates before applying them. pycrdt settles concurrent writes to a map key by
client id, and a write that has seen the current value replaces it for everyone: once a forged
write is merged, it shadows the owner's value in every replica it reaches, even if readers then
ignore it, and it travels on through anti-entropy, so every node pays for it. Readers that
reject bad values and owners that re-assert their keys would both fight an update that is
already everywhere. So a node decodes each update (yupdate.py) and applies it only if every
change in it is allowed; one bad change rejects the whole update, which is counted by reason.
Relays stay safe because nothing here depends on who forwarded the update: a third node's
anti-entropy diff carries the owners' own signed items.

The rules, for the part of an update this document does not hold yet:

* Shape: only items of the root map, holding one byte string or a deleted run; no GC or Skip
  structs, no right origins (the mesh never writes them), no gaps in a client's clocks.
* Key: an item names its key, or inherits the key of the item it overwrites (its origin), which
  this document or the same update must hold; otherwise the update waits (`Unresolved`: it may
  have overtaken its predecessor; the caller keeps it and retries).
* Live items: the envelope is signed by the key's owner for exactly this item (fingerprint of
  the public key = the owner id's, client id = the one derived from that key, signature valid),
  and the payload passes the namespace's validator (schema, types, ranges), so a malformed
  value never reaches the request path. Generation markers (``owner/``) hold the generation.
* Deleted runs (overwritten values whose content the sender dropped): the client must belong to
  the key's owner. A client's newest new struct must be a signed live item: the owner's newest
  write is always live (owners overwrite, they never Yjs-delete: see identity.py's tombstones),
  so no one can advance an owner's clock with unsigned structs and make peers skip its writes.
* Delete set: a deleted range may only cover items that are already superseded (a newer item
  of the same key exists here or in the update) and known; deleting an owner's current value, or
  pre-deleting items not seen yet, is refused.

What this does not stop: an insider writing its *own* keys. The worker registry lets any node
register or remove any worker (that is the feature); values are schema-checked, and HybridClock
ignores stamps from far in the future. An insider can still flood the mesh with its own keys or
gossip false membership; those need the cluster key and are out of this module's reach.

Cost (measured on the shared dev box): decoding and checking a one-write delta against a
100-key document takes ~110 us, ~90 of them the Ed25519 verification; a full state of 100 worker
records (an anti-entropy answer to a fresh node) ~11 ms, one verification per item. It runs in
the mesh actor, off the request path.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import msgpack

from smg.mesh import identity as ident
from smg.mesh import yupdate as y

Reason = Literal[
    "malformed", "not_owner", "bad_signature", "unsigned", "invalid_value", "forbidden_delete"
]
Validator = Callable[[str, Any], bool]  # (subkey, decoded value) -> acceptable?


class Rejected(Exception):
    """An update that breaks a rule; `.reason` is a stable metric label."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason
        self.detail = detail


class Unresolved(Exception):
    """An update that depends on items this document does not hold yet."""


def owner_of(key: str) -> str:
    return key.split("/", 1)[0]


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


@dataclass(slots=True)
class ItemIndex:
    """What one document holds, by Yjs item id. Mirrors the document: extended after each
    applied update and each local write, reset with the document."""

    runs: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # start, end, key
    latest: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (client, clock)
    owners: dict[int, str] = field(default_factory=dict)  # client -> owner, from signed items

    def next_clock(self, client: int) -> int:
        runs = self.runs.get(client)
        return runs[-1][1] if runs else 0

    def key_at(self, client: int, clock: int) -> str | None:
        runs = self.runs.get(client)
        if not runs:
            return None
        i = bisect.bisect_right(runs, clock, key=_start) - 1
        if i >= 0 and runs[i][0] <= clock < runs[i][1]:
            return runs[i][2]
        return None

    def add(self, client: int, clock: int, length: int, key: str) -> None:
        runs = self.runs.setdefault(client, [])
        end = clock + length
        if runs and runs[-1][1] == clock and runs[-1][2] == key:
            runs[-1] = (runs[-1][0], end, key)  # repeated overwrites of one key: one run
        elif not runs or runs[-1][1] <= clock:
            runs.append((clock, end, key))
        else:
            bisect.insort(runs, (clock, end, key), key=_start)
        last = self.latest.get(key)
        if last is None or last[1] < end - 1:
            self.latest[key] = (client, end - 1)

    def overlapping(self, client: int, start: int, end: int) -> list[tuple[int, int, str]]:
        runs = self.runs.get(client, [])
        i = max(0, bisect.bisect_right(runs, start, key=_start) - 1)
        out = []
        while i < len(runs) and runs[i][0] < end:
            if runs[i][1] > start:
                out.append(runs[i])
            i += 1
        return out


def _start(run: tuple[int, int, str]) -> int:
    return run[0]


@dataclass(frozen=True, slots=True)
class Context:
    namespace: str
    generation: int
    validate: Validator | None


def check(update: y.Update, index: ItemIndex, ctx: Context) -> ItemIndex:
    """The items `update` adds (as an index of their own, for `merge_into`), if every change in
    it is allowed; raises Rejected or Unresolved otherwise."""
    new = _new_structs(update, index)
    added = ItemIndex()
    keys = _resolve(new, index, added)
    tails: dict[int, int] = {}
    for s in new:
        tails[s.client] = max(tails.get(s.client, -1), s.clock + s.length - 1)
    signed_tails: set[int] = set()
    for s, key in zip(new, keys, strict=True):  # live items first: they bind clients to owners
        if s.value is None:
            continue
        _check_live(s, key, ctx)
        owner = owner_of(key)
        if index.owners.get(s.client, owner) != owner or added.owners.get(s.client, owner) != owner:
            raise Rejected("not_owner", "a client of another owner")
        added.owners[s.client] = owner
        if s.clock == tails[s.client]:
            signed_tails.add(s.client)
    if tails.keys() - signed_tails:
        raise Rejected("unsigned", "a client's newest struct is not a signed value")
    for s, key in zip(new, keys, strict=True):
        if s.value is None and added.owners.get(s.client) != owner_of(key):
            raise Rejected("not_owner", "a deleted run of another owner's key")
    _check_deletes(update, index, added)
    return added


def merge_into(index: ItemIndex, added: ItemIndex) -> None:
    """Record what an applied update added (the result of `check`)."""
    for client, runs in added.runs.items():
        for start, end, key in runs:
            index.add(client, start, end - start, key)
    index.owners.update(added.owners)


def _new_structs(update: y.Update, index: ItemIndex) -> list[y.Struct]:
    """The structs this document does not hold yet, in order; shape rules on the way."""
    expected: dict[int, int] = {}
    out: list[y.Struct] = []
    for s in update.structs:
        if s.kind in (y.GC, y.SKIP) or s.right_origin is not None:
            raise Rejected("malformed", "only root-map items are written by the mesh")
        if s.origin is None and (s.parent != y.ROOT or s.key is None):
            raise Rejected("malformed", "an item outside the root map")
        nxt = expected.get(s.client, index.next_clock(s.client))
        end = s.clock + s.length
        if end <= nxt:
            continue  # already held
        if s.clock > nxt:
            raise Unresolved(f"gap in client {s.client}'s clocks")
        if s.clock < nxt:
            # a deleted run computed against an older state vector: its tail is new, and it
            # continues the run (same key) we already hold
            s = replace(s, clock=nxt, length=end - nxt, origin=(s.client, nxt - 1), key=None)
        expected[s.client] = end
        out.append(s)
    return out


def _resolve(new: list[y.Struct], index: ItemIndex, added: ItemIndex) -> list[str]:
    """Each new struct's key: its own, or its origin's (held here, or earlier in the update)."""
    keys: list[str] = [""] * len(new)
    pending = list(range(len(new)))
    while pending:
        unresolved = []
        for i in pending:
            s = new[i]
            k = s.key if s.origin is None else index.key_at(*s.origin) or added.key_at(*s.origin)
            if k is None:
                unresolved.append(i)
                continue
            keys[i] = k
            added.add(s.client, s.clock, s.length, k)
        if len(unresolved) == len(pending):
            raise Unresolved("an overwrite of an item not held yet")
        pending = unresolved
    return keys


def _check_live(s: y.Struct, key: str, ctx: Context) -> None:
    owner, sep, subkey = key.partition("/")
    if not sep or not owner or s.value is None:
        raise Rejected("malformed", "a key without an owner prefix")
    env = ident.open_value(s.value)
    if env is None:
        raise Rejected("unsigned", "a value that is not a signed envelope")
    if ident.fingerprint(env.public_key) != ident.fingerprint_of(owner):
        raise Rejected("not_owner", f"{key!r} signed by another node")
    if s.client != ident.client_id_for(env.public_key, ctx.namespace, ctx.generation):
        raise Rejected("not_owner", f"{key!r} written under another node's client id")
    if not ident.verify(env, owner, ctx.namespace, ctx.generation, s.client, s.clock, key):
        raise Rejected("bad_signature", f"{key!r}")
    if env.tombstone:
        return
    try:
        value = msgpack.unpackb(env.payload, raw=False, strict_map_key=False)
    except Exception:
        raise Rejected("invalid_value", f"{key!r} is not msgpack") from None
    if not subkey:  # the owner's generation marker
        if value != ctx.generation:
            raise Rejected("invalid_value", "a marker of another generation")
    elif ctx.validate is not None and not ctx.validate(subkey, value):
        raise Rejected("invalid_value", f"{key!r}")


def _check_deletes(update: y.Update, index: ItemIndex, added: ItemIndex) -> None:
    for client, clock, length in update.deletes:
        end = clock + length
        if end > max(index.next_clock(client), added.next_clock(client)):
            raise Unresolved("a delete of items not held yet")
        for runs in (index.overlapping(client, clock, end), added.overlapping(client, clock, end)):
            for _start, _end, key in runs:
                latest = added.latest.get(key) or index.latest.get(key)
                if latest is not None and latest[0] == client and clock <= latest[1] < end:
                    raise Rejected("forbidden_delete", f"the current value of {key!r}")
