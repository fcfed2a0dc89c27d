"""Deterministic fake model output: words, token counts and embeddings. Pure: no IO, no clock.

A worker seed fixes a cyclic stream of `STREAM_LEN` words drawn from `WORDS`. A request picks a
starting point in that stream from a fingerprint of (request seed, prompt, choice index), and its
answer is the next N words, each one "token" with a leading space. So the same (worker seed,
request seed, prompt) always gives the same text, and producing it costs a slice and a join.

The stream is stored twice over (`doubled`), so any window of up to `STREAM_LEN` tokens that
starts inside the first copy is one plain slice; callers that render per-token bytes build their
own table aligned with `doubled` (see `TextGen.map`).

Prompt tokens are estimated as ceil(characters / 4), at least 1: the usual rule of thumb for
English BPE vocabularies, and free to compute. Token-id prompts count one token per id.
"""

from __future__ import annotations

import hashlib
import random
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

STREAM_LEN = 4096
_MASK64 = (1 << 64) - 1

WORDS: tuple[str, ...] = tuple(
    """
    the of and to in is it that was for on are as with his they at be this from have or by one
    had not but what all were when we there can an your which their said if do will each about
    how up out them then she many some so these would other into has more her two like him see
    time could no make than first been its who now people my made over did down only way find
    use may water long little very after words called just where most know get through back
    much before go good new write our used me man too any day same right look think also around
    another came come work three word must because does part even place well such here take why
    things help put years different away again off went old number great tell men say small
    every found still between name should home big give air line set own under read last never
    us left end along while might next sound below saw something thought both few those always
    looked show large often together asked house world going want school important until form
    food keep children feet land side without boy once animals life enough took sometimes four
    head above kind began almost live page got earth need far hand high year mother light parts
    country father let night following picture being study second eyes soon times story boys
    since white days ever paper hard near sentence better best across during today others sure
    means knew ideas try told young miles sun ways thing whole hear example heard several change
    answer room sea against top turned learn point city play toward five using himself usually
    """.split()
)


def fingerprint(parts: Iterable[str]) -> tuple[int, int]:
    """(crc32 over the parts, total characters): the prompt's identity and its size."""
    crc = 0
    chars = 0
    for part in parts:
        crc = zlib.crc32(part.encode("utf-8", "surrogatepass"), crc)
        crc = zlib.crc32(b"\x00", crc)  # ["ab", "c"] and ["a", "bc"] differ
        chars += len(part)
    return crc, chars


def estimate_tokens(chars: int) -> int:
    """Prompt tokens for `chars` characters of text: ceil(chars / 4), at least 1."""
    return max(1, (chars + 3) // 4)


def _mix64(x: int) -> int:
    """splitmix64's finaliser: spreads every input bit over the whole word."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class TextGen:
    """The word stream of one worker seed."""

    __slots__ = ("doubled", "seed")

    def __init__(self, seed: int, words: Sequence[str] = WORDS) -> None:
        rng = random.Random(seed)
        stream = tuple(" " + w for w in rng.choices(words, k=STREAM_LEN))
        self.seed = seed
        self.doubled: tuple[str, ...] = stream + stream

    def offset(self, prompt_crc: int, request_seed: int | None, choice: int) -> int:
        """Where in the stream the answer for this (prompt, seed, choice) starts."""
        x = prompt_crc ^ (self.seed * 0x9E3779B97F4A7C15) ^ (choice * 0xC2B2AE3D27D4EB4F)
        if request_seed is not None:
            x ^= ((request_seed & _MASK64) + 1) * 0x165667B19E3779F9
        x = _mix64(x)
        return x % STREAM_LEN

    def map(self, render: Callable[[str], T]) -> tuple[T, ...]:
        """A table aligned with `doubled`: `render(word)` for every position."""
        cache: dict[str, T] = {}
        out = []
        for word in self.doubled:
            if word not in cache:
                cache[word] = render(word)
            out.append(cache[word])
        return tuple(out)

    def text(self, offset: int, count: int) -> str:
        """The `count` tokens starting at `offset`, as one string."""
        return "".join(self.words(offset, 0, count))

    def words(self, offset: int, start: int, count: int) -> list[str]:
        out: list[str] = []
        for begin, end in spans(offset, start, count):
            out.extend(self.doubled[begin:end])
        return out


def spans(offset: int, start: int, count: int) -> list[tuple[int, int]]:
    """Slices of a `doubled` table holding tokens start..start+count of the answer at `offset`."""
    out = []
    while count > 0:
        begin = (offset + start) % STREAM_LEN
        step = min(count, STREAM_LEN)
        out.append((begin, begin + step))
        start += step
        count -= step
    return out


EMBED_DIMS = 8  # the sim's embedding size (HTTP: unless the request asks `dimensions`)


def embedding(seed: int, key: int, dims: int) -> list[float]:
    """A unit vector of `dims` floats that depends only on (seed, key), e.g. a `fingerprint`."""
    salt = (seed & _MASK64).to_bytes(8, "little")
    data = (key & _MASK64).to_bytes(8, "little")
    raw = bytearray()
    block = 0
    while len(raw) < 2 * dims:
        person = block.to_bytes(8, "little")
        raw += hashlib.blake2b(data, digest_size=64, salt=salt, person=person).digest()
        block += 1
    ints = struct.unpack_from(f"<{dims}H", raw)
    vec = [v / 32767.5 - 1.0 for v in ints]
    norm = sum(v * v for v in vec) ** 0.5 or 1.0
    return [v / norm for v in vec]
