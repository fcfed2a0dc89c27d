"""Fetch an engine's tokenizer over gRPC (`GetTokenizer`) into an on-disk cache keyed by sha256.

The engine streams a zip in chunks; the last chunk carries the sha256 of the whole zip. The
bundle is refused (nothing written) when that fingerprint is missing or does not match, when it
is larger than `MAX_BUNDLE_BYTES`, or when the archive is unsafe: an absolute or `..` path, a
symlink, more than `MAX_ENTRIES` entries or more than `MAX_UNPACKED_BYTES` unpacked (the limits
of the Rust gateway). A good bundle is unpacked into a temporary directory beside the cache entry
and renamed to `<cache_root>/<sha256>/` in one step, so a reader never sees half a tokenizer and
two gateways racing on one cache both end with the same directory. A cached entry is reused.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import AsyncIterator
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Protocol

MAX_BUNDLE_BYTES = 200 * 1024 * 1024
MAX_UNPACKED_BYTES = 500 * 1024 * 1024
MAX_ENTRIES = 50
_COPY_BLOCK = 1024 * 1024


class TokenizerDownloadError(Exception):
    """The engine's tokenizer bundle was refused; nothing was written to the cache."""


class TokenizerSource(Protocol):
    """What `fetch_tokenizer` needs of an engine client (`EngineClient` is one)."""

    url: str

    def tokenizer_chunks(self, timeout_s: float = ...) -> AsyncIterator[tuple[bytes, str]]: ...


def default_cache_root() -> Path:
    """`$SMG_CACHE_DIR/tokenizers`, else `~/.cache/smg/tokenizers`."""
    base = os.environ.get("SMG_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "smg"
    return root / "tokenizers"


async def fetch_tokenizer(
    client: TokenizerSource, cache_root: Path | None = None, *, timeout_s: float = 120.0
) -> Path:
    """Download, verify and unpack the engine's tokenizer; return its cache directory."""
    root = cache_root if cache_root is not None else default_cache_root()
    data, announced = await _collect(client, timeout_s)
    actual = hashlib.sha256(data).hexdigest()
    if actual != announced.strip().lower():
        raise TokenizerDownloadError(
            f"tokenizer bundle from {client.url} failed verification: the engine announced "
            f"sha256 {announced}, the {len(data)} bytes received hash to {actual}; "
            "nothing was written"
        )
    return await asyncio.to_thread(install_bundle, data, actual, root)


async def _collect(client: TokenizerSource, timeout_s: float) -> tuple[bytes, str]:
    parts: list[bytes] = []
    size = 0
    sha = ""
    chunks = 0
    async for data, chunk_sha in client.tokenizer_chunks(timeout_s=timeout_s):
        chunks += 1
        size += len(data)
        if size > MAX_BUNDLE_BYTES:
            raise TokenizerDownloadError(
                f"tokenizer bundle from {client.url} exceeds {MAX_BUNDLE_BYTES} bytes"
            )
        parts.append(data)
        sha = chunk_sha  # only the last chunk's counts
    if chunks == 0 or size == 0:
        raise TokenizerDownloadError(f"tokenizer bundle from {client.url} is empty")
    if not sha:
        raise TokenizerDownloadError(
            f"tokenizer bundle from {client.url} ended without its sha256 fingerprint"
        )
    return b"".join(parts), sha


def install_bundle(data: bytes, sha256: str, cache_root: Path) -> Path:
    """Unpack a verified zip into `cache_root/<sha256>/` (atomically); reuse it if present."""
    final = cache_root / sha256
    if final.is_dir():
        return final
    try:
        archive = zipfile.ZipFile(BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise TokenizerDownloadError(f"tokenizer bundle is not a zip archive: {exc}") from exc
    with archive:
        members = _checked_members(archive)
        cache_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{sha256[:16]}.", dir=cache_root))
        renamed = False
        try:
            _extract(archive, members, staging)
            try:
                os.rename(staging, final)  # atomic within one filesystem
                renamed = True
            except OSError:
                if not final.is_dir():  # else another process installed the same bundle first
                    raise
        finally:
            if not renamed:
                shutil.rmtree(staging, ignore_errors=True)
    return final


def _checked_members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    members = archive.infolist()
    if len(members) > MAX_ENTRIES:
        raise TokenizerDownloadError(
            f"tokenizer bundle has too many entries ({len(members)} > {MAX_ENTRIES})"
        )
    total = 0
    for info in members:
        name = info.filename
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if (
            not name
            or name.startswith(("/", "\\"))
            or (len(name) > 1 and name[1] == ":")  # a Windows drive
            or ".." in parts
        ):
            raise TokenizerDownloadError(f"tokenizer bundle has an unsafe path: {name!r}")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise TokenizerDownloadError(f"tokenizer bundle has a symlink: {name!r}")
        total += info.file_size
    if total > MAX_UNPACKED_BYTES:
        raise TokenizerDownloadError(
            f"tokenizer bundle unpacks to {total} bytes (> {MAX_UNPACKED_BYTES})"
        )
    return members


def _extract(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], into: Path) -> None:
    budget = MAX_UNPACKED_BYTES  # counts real bytes: a header may understate them
    for info in members:
        target = into.joinpath(*PurePosixPath(info.filename.replace("\\", "/")).parts)
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as dst:
            while block := src.read(_COPY_BLOCK):
                budget -= len(block)
                if budget < 0:
                    raise TokenizerDownloadError(
                        f"tokenizer bundle unpacks to more than {MAX_UNPACKED_BYTES} bytes"
                    )
                dst.write(block)
