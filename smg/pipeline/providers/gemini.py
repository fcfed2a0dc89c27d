"""The Gemini API (generativelanguage.googleapis.com, v1beta) as a `Provider` (pure; no IO).

* chat: POST `/v1beta/models/{model}:generateContent`, or `:streamGenerateContent?alt=sse`
  when streaming; the key goes in `x-goog-api-key` (never in the URL, so never in a log line);
  the body is `gemini_request.gemini_body`;
* answers and streams: `gemini_answer` (errors keep their status, with a stable OpenAI code);
* models: GET `/v1beta/models?pageSize=1000`; ids are the `name`s without `models/`.

The wall clock (`created`) and the id maker (completion and tool-call ids) are injected.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson

from smg.errors import ApiError
from smg.pipeline.providers.base import Outgoing, ProviderRequestError
from smg.pipeline.providers.gemini_answer import GeminiStream, completion, error_json
from smg.pipeline.providers.gemini_request import gemini_body

API = "/v1beta"
MODELS_PAGE = 1000  # the most models one listing returns (Gemini serves a few dozen)


def random_id() -> str:
    return uuid.uuid4().hex[:24]


class Gemini:
    name = "gemini"

    def __init__(self, now: Callable[[], float], new_id: Callable[[], str] = random_id) -> None:
        self._now = now
        self._new_id = new_id

    def chat_request(self, body: dict[str, Any], *, api_key: str | None, stream: bool) -> Outgoing:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ProviderRequestError("model", "'model' must be a non-empty string")
        model = model.removeprefix("models/")
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return Outgoing(
            "POST",
            f"{API}/models/{quote(model, safe='-._~')}:{verb}",
            self._headers(api_key),
            orjson.dumps(gemini_body(body)),
        )

    def chat_answer(self, status: int, body: bytes) -> tuple[int, bytes]:
        if status >= 400:
            return status, error_json(status, body)
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return 502, ApiError(502, "upstream_error", "Gemini answered no JSON object").to_json()
        made = completion(data, model="gemini", created=int(self._now()), new_id=self._new_id)
        return status, orjson.dumps(made)

    def chat_stream(self, model: str) -> GeminiStream:
        return GeminiStream(model, created=int(self._now()), new_id=self._new_id)

    def models_request(self, api_key: str | None) -> Outgoing:
        return Outgoing("GET", f"{API}/models?pageSize={MODELS_PAGE}", self._headers(api_key))

    def model_ids(self, status: int, body: bytes) -> tuple[str, ...]:
        if status != 200:
            return ()
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ()
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, list):
            return ()
        return tuple(
            m["name"].removeprefix("models/")
            for m in models
            if isinstance(m, dict) and isinstance(m.get("name"), str)
        )

    @staticmethod
    def _headers(api_key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["x-goog-api-key"] = api_key
        return headers
