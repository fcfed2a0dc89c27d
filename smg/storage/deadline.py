"""One storage call under one deadline, with the backend's failures as StorageError (naming the
backend, the operation and the error's type: never a URL, never record contents)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from smg.storage.contract import ItemConflict, StorageError

T = TypeVar("T")


async def bounded(
    backend: str,
    op: str,
    timeout_s: float,
    errors: tuple[type[BaseException], ...],
    work: Callable[[], Awaitable[T]],
    conflicts: tuple[type[BaseException], ...] = (),
) -> T:
    """`work()` within `timeout_s`; `errors` become StorageError, `conflicts` (a unique-key
    violation on an item id) ItemConflict."""
    try:
        async with asyncio.timeout(timeout_s):
            return await work()
    except TimeoutError:
        raise StorageError(f"{backend} {op} timed out after {timeout_s}s") from None
    except conflicts as e:
        raise ItemConflict(f"an item id is already in the conversation ({op})") from e
    except errors as e:
        raise StorageError(f"{backend} {op} failed: {type(e).__name__}") from None
