"""The transport shell of a provider worker: its request out through `Provider.chat_request`,
its answer back as an OpenAI chat completion through `chat_answer` / `chat_stream`.

`HttpBackend.open` hands a provider worker's attempt here and gets back a response (the lean
client's `H1Response`, read like aiohttp's) whose `content` reads OpenAI bytes: the relay, the
Responses and Messages renderers and the runner's retry on a status read it as they read any
HTTP worker's answer, so every surface rides this one path. A whole answer (or an error
status) is read here under the size cap and the request's deadline and translated at once (its
status may change: a vendor body that is not an answer is 502); a 200 event stream is
translated chunk by chunk as the reader pulls it.

The credential: the worker's key (or the client's own with bring-your-own-key: `forward_headers`
chose it) goes into the vendor's own header. No credential ever reaches a log or an error.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import orjson

from smg import errors
from smg.pipeline.providers.base import (
    Outgoing,
    Provider,
    ProviderRequestError,
    StreamTranslator,
)

CHAT_PATH = "/v1/chat/completions"


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The key of an `Authorization: Bearer ...` header (any case of the scheme), else None."""
    auth = headers.get("Authorization")
    if not auth:
        return None
    scheme, _, token = auth.partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else auth.strip()
    return token or None


def outgoing_request(
    provider: Provider, path: str, body: bytes, api_key: str | None
) -> tuple[Outgoing, bool, bool]:
    """(the vendor's `Outgoing`, whether a stream was asked, whether its usage was asked:
    `stream_options.include_usage`) for one chat completions body; a 400 `ApiError` for another
    path or what the vendor cannot express."""
    if path.split("?", 1)[0] != CHAT_PATH:
        raise errors.invalid_request(
            f"{path} is not served by a {provider.name} worker (chat completions only)",
            code="unsupported_endpoint",
        )
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.invalid_json("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise errors.invalid_json("the request body must be a JSON object")
    stream = data.get("stream") is True
    options = data.get("stream_options")
    usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    try:
        return provider.chat_request(data, api_key=api_key, stream=stream), stream, usage
    except ProviderRequestError as exc:
        raise errors.invalid_request(
            exc.message, param=exc.param, code="unsupported_parameter"
        ) from None


class WholeContent:
    """A translated whole answer, read like aiohttp's `StreamReader` (`readany` to b"")."""

    __slots__ = ("_data", "_exc")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._exc: BaseException | None = None

    async def readany(self) -> bytes:
        if self._exc is not None:
            raise self._exc
        data, self._data = self._data, b""
        return data

    def exception(self) -> BaseException | None:
        return self._exc

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self._exc = exc


class TranslatedStream:
    """The upstream's stream, read through a `StreamTranslator`: OpenAI chunk SSE out; the
    translator's `ProviderStreamError` is raised from `readany` (the relay's failure path)."""

    __slots__ = ("_done", "_inner", "_translator")

    def __init__(self, inner: aiohttp.StreamReader, translator: StreamTranslator) -> None:
        self._inner = inner
        self._translator = translator
        self._done = False

    async def readany(self) -> bytes:
        while not self._done:
            chunk = await self._inner.readany()
            if not chunk:
                self._done = True
                return self._translator.close()
            out = self._translator.feed(chunk)
            if out:
                return out
        return b""

    def exception(self) -> BaseException | None:
        return self._inner.exception()

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self._inner.set_exception(exc)
