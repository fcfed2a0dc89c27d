"""Data-parallel ranks as workers (`--dp-aware`): an engine with N data-parallel ranks is served
as N workers, `url@0` .. `url@N-1` (the Rust gateway's names), each request of one carrying its
rank (`data_parallel_rank`). Pure.

A rank worker's URL is its engine's with `@rank` added: connecting goes to `engine_url(url)`
(one connection shared by the ranks), the rank is `rank_of(url)`. An `@` followed by anything
but digits (userinfo) is not a rank.

A gRPC engine gets the rank in its request message; an HTTP server (SGLang) in the JSON body,
`data_parallel_rank` (`with_rank`), as the Rust gateway's `prepare_request` puts it.
"""

from __future__ import annotations

import orjson

RANK_FIELD = "data_parallel_rank"


def engine_url(url: str) -> str:
    """The URL of the engine behind a worker URL (itself unless it names a rank)."""
    at = url.rfind("@")
    if at < 0 or not url[at + 1 :].isdigit():
        return url
    return url[:at]


def rank_of(url: str) -> int | None:
    """The data-parallel rank a worker URL names, or None."""
    at = url.rfind("@")
    if at < 0 or not url[at + 1 :].isdigit():
        return None
    return int(url[at + 1 :])


def rank_urls(url: str, dp_size: int) -> tuple[str, ...]:
    """The worker URLs an engine of `dp_size` ranks becomes."""
    return tuple(f"{url}@{rank}" for rank in range(dp_size))


def expands(url: str, dp_size: int | None) -> bool:
    """True when a worker at `url` reporting `dp_size` ranks is to become one worker per rank
    (more than one rank, and not a rank worker already)."""
    return dp_size is not None and dp_size > 1 and rank_of(url) is None


def with_rank(body: bytes, rank: int) -> bytes:
    """An HTTP request body for a rank worker: the JSON object with `data_parallel_rank` set
    (replacing one the client sent). A body that is not a JSON object is left as it is (the
    worker answers it as it would anyway)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(obj, dict):
        return body
    obj[RANK_FIELD] = rank
    return orjson.dumps(obj)
