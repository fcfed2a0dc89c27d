"""A provider's translated stream in OpenAI's usage terms. Pure.

OpenAI's API sends a stream's token counts only when the request asks
(`stream_options.include_usage`), and then as one last chunk of their own (`choices: []`, after
the finish chunk). The vendors' translators always count (Gemini's as that chunk, Anthropic's on
the finish chunk) and some OpenAI-compatible upstreams send the counts unasked; `UsageShaped`
wraps any `StreamTranslator` and puts its output in OpenAI's shape: not asked, no counts (a
`choices: []` chunk is dropped, `usage` taken off any other chunk); asked, the counts in their
own chunk (a chunk carrying both choices and counts is split in two). Frames without counts
pass as they are. The Responses and Messages renderers ask for usage themselves, so they still
get it.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from smg.pipeline.providers.base import StreamTranslator

_SEP = b"\n\n"
_SEP_RE = re.compile(rb"(\r\n\r\n|\n\n|\r\r)")  # SSE frame ends
_BUFFER_LIMIT = 4 * 1024 * 1024  # a frame longer than this passes unexamined


class UsageShaped:
    __slots__ = ("_buf", "_inner", "include_usage")

    def __init__(self, inner: StreamTranslator, include_usage: bool) -> None:
        self._inner = inner
        self.include_usage = include_usage
        self._buf = b""  # a frame not yet ended (an upstream's bytes are split anywhere)

    def feed(self, data: bytes) -> bytes:
        return self._frames(self._inner.feed(data))

    def close(self) -> bytes:
        out = self._frames(self._inner.close())
        rest, self._buf = self._buf, b""
        return out + rest

    def _frames(self, data: bytes) -> bytes:
        if not data:
            return b""
        buf = self._buf + data
        parts = _SEP_RE.split(buf)  # frame, separator, frame, ..., the unended rest
        rest = parts.pop()
        if len(rest) > _BUFFER_LIMIT:
            parts += [rest, b""]
            rest = b""
        self._buf = rest
        if b'"usage"' not in buf:  # most frames: nothing to look at
            return buf[: len(buf) - len(rest)]
        return b"".join(self._frame(f, sep) for f, sep in zip(parts[::2], parts[1::2], strict=True))

    def _frame(self, frame: bytes, sep: bytes) -> bytes:
        kept = frame + sep
        if b'"usage"' not in frame or not frame.startswith(b"data:"):
            return kept
        try:
            chunk: Any = orjson.loads(frame[5:])
        except orjson.JSONDecodeError:
            return kept
        if not isinstance(chunk, dict) or chunk.get("usage") is None:
            return kept
        usage = chunk.pop("usage")
        choices = chunk.get("choices")
        if not self.include_usage:
            return b"" if choices == [] else _data(chunk)
        if choices == []:
            return kept
        return _data(chunk) + _data({**chunk, "choices": [], "usage": usage})


def _data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + _SEP
