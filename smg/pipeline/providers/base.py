"""The seam between the gateway and an external provider: what each vendor module implements.

Everything here is pure (sans-IO): bytes and dicts in, bytes and dicts out, so every vendor's
translation is unit-tested on recorded wire data and the shell stays the same for all of them.

The gateway always speaks OpenAI chat completions to a provider worker (the client's surface,
Messages or Responses included, is rendered from that as for any HTTP worker); the provider
turns it into its own wire format and back:

* `chat_request`: an OpenAI chat completions body (the `model` already the upstream's id) into
  the vendor's request (path relative to the worker's base URL, headers with its credential,
  body). What the vendor cannot express is a `ProviderRequestError` (a 400 to the client, naming
  the parameter), never silently dropped.
* `chat_answer`: the vendor's whole answer (its status and body) into (status, an OpenAI chat
  completion JSON) on success, or (status, an OpenAI error JSON) on an error status: the status is
  kept (a 429 stays a 429, a 401 a 401...), the message is the vendor's, never a credential.
* `chat_stream`: a `StreamTranslator` for one streamed answer: vendor bytes in, split anywhere;
  OpenAI `chat.completion.chunk` SSE bytes (`data: {...}\\n\\n`) out; `close()` at the upstream's
  end returns the last frames and `data: [DONE]\\n\\n`, or raises `ProviderStreamError` when the
  stream broke off or carried an error event (the relay turns that into its error event).
* `models_request` / `model_ids`: the listing the health check reads (which ids the worker serves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Outgoing:
    method: str  # "POST" or "GET"
    path: str  # path and query, appended to the worker's base URL (which may end in a prefix)
    headers: dict[str, str] = field(default_factory=dict)  # the vendor's auth, version, type
    body: bytes = b""


class ProviderRequestError(ValueError):
    """The client's chat request asks for something the vendor cannot express: a 400."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


class ProviderStreamError(Exception):
    """A vendor stream ended early or carried an error event; `status` and `code` as OpenAI's."""

    def __init__(self, message: str, *, status: int = 502, code: str = "upstream_error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class StreamTranslator(Protocol):
    def feed(self, data: bytes) -> bytes: ...

    def close(self) -> bytes: ...


class Provider(Protocol):
    name: str  # "openai" | "anthropic" | "gemini"

    def chat_request(
        self, body: dict[str, Any], *, api_key: str | None, stream: bool
    ) -> Outgoing: ...

    def chat_answer(self, status: int, body: bytes) -> tuple[int, bytes]: ...

    def chat_stream(self, model: str) -> StreamTranslator: ...

    def models_request(self, api_key: str | None) -> Outgoing: ...

    def model_ids(self, status: int, body: bytes) -> tuple[str, ...]: ...
