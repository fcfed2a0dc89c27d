"""Prefill/decode disaggregation, the pure part: config entries, pair selection, bootstrap fields.

SGLang's PD protocol over HTTP: the gateway sends the same request to a prefill and a decode
worker at once, adding `bootstrap_host` (the prefill worker's host), `bootstrap_port` (its KV
bootstrap server) and `bootstrap_room` (a random 63-bit id both sides meet on). The decode
worker's answer is the client's. This module holds no sockets and no clock: `now` is passed in.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from smg import errors
from smg.core.dp import engine_url
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.policies.base import Policy, RouteRequest

PREFILL = "prefill"
DECODE = "decode"
ROOM_BITS = 63


@dataclass(frozen=True, slots=True)
class PdPair:
    prefill: WorkerSnapshot
    decode: WorkerSnapshot


def parse_prefill(entry: str) -> tuple[str, int | None]:
    """`"URL"`, `"URL PORT"` or `"URL none"` (from `--prefill URL [PORT]`) -> (url, port)."""
    words = entry.split()
    if not words or len(words) > 2:
        raise ValueError(f"--prefill takes URL [BOOTSTRAP_PORT], got {entry!r}")
    if len(words) == 1 or words[1].lower() == "none":
        return words[0], None
    try:
        port = int(words[1])
    except ValueError:
        raise ValueError(f"--prefill bootstrap port must be a number or none: {entry!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"--prefill bootstrap port out of range: {entry!r}")
    return words[0], port


def bootstrap_host(url: str) -> str:
    """The host part of a worker URL (IPv6 without brackets, as SGLang expects); a rank
    worker's (`url@rank`) is its engine's."""
    host = urlsplit(engine_url(url)).hostname
    if not host:
        raise ValueError(f"worker URL has no host: {url!r}")
    return host


def bootstrap_port_from(server_args: Mapping[str, Any]) -> int | None:
    """A prefill engine's KV bootstrap port from its SGLang server args (`GetServerInfo`'s
    `server_args` as a dict, or `/get_server_info`): `disaggregation_bootstrap_port`, when the
    engine runs in prefill mode and the value is a port. Struct numbers arrive as floats."""
    if server_args.get("disaggregation_mode", PREFILL) != PREFILL:
        return None
    value = server_args.get("disaggregation_bootstrap_port")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        port = float(value)
    except ValueError:
        return None
    if not port.is_integer() or not 0 < port < 65536:
        return None
    return int(port)


def new_room(rng: random.Random) -> int:
    return rng.getrandbits(ROOM_BITS)


def no_role_worker(role: str, model: str | None) -> errors.ApiError:
    where = f" for model '{model}'" if model else ""
    return errors.ApiError(
        503,
        f"no_{role}_worker",
        f"No healthy {role} worker{where} (PD mode needs one of each role)",
        type="server_error",
    )


def _pick(
    role: str,
    candidates: Sequence[WorkerSnapshot],
    policy: Policy,
    route: RouteRequest,
    now: float,
) -> WorkerSnapshot:
    pool = [w for w in candidates if w.worker_type == role and w.routable(now)]
    index = policy.select(pool, route) if pool else None
    if index is None:
        raise no_role_worker(role, route.model)
    return pool[index]


def select_pair(
    candidates: Sequence[WorkerSnapshot],
    route: RouteRequest,
    *,
    prefill_policy: Policy,
    decode_policy: Policy,
    now: float,
) -> PdPair:
    """One routable prefill and one routable decode worker; regular workers are never used.
    Raises `no_prefill_worker` / `no_decode_worker` (503)."""
    prefill = _pick(PREFILL, candidates, prefill_policy, route, now)
    decode = _pick(DECODE, candidates, decode_policy, route, now)
    return PdPair(prefill, decode)


def inject_bootstrap(body: dict[str, Any], prefill: WorkerSnapshot, room: int) -> dict[str, Any]:
    """A copy of `body` carrying the prefill worker's bootstrap fields. A batch (`text` or
    `input_ids` as a list of prompts, SGLang's /generate) gets one entry per prompt, each with
    its own room (`room`, `room + 1`, ... modulo 2**63)."""
    host = bootstrap_host(prefill.url)
    port = prefill.bootstrap_port
    out = dict(body)
    size = batch_size(body)
    if size is None:
        out |= {"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room}
    else:
        mask = (1 << ROOM_BITS) - 1
        out |= {
            "bootstrap_host": [host] * size,
            "bootstrap_port": [port] * size,
            "bootstrap_room": [(room + i) & mask for i in range(size)],
        }
    return out


def batch_size(body: dict[str, Any]) -> int | None:
    """Prompts in a SGLang /generate batch; None for a single request (OpenAI bodies)."""
    text = body.get("text")
    if isinstance(text, list):
        return len(text)
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return len(ids)
    return None
