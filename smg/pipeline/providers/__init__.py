"""External providers as workers: the pure translation cores (no IO), one module per vendor.

A provider worker (`runtime_type: external` with a `provider`, or `--backend openai|anthropic`)
is reached over HTTP like any worker; what differs is only what goes on the wire. Each vendor's
module implements `base.Provider`: an OpenAI chat completions request in, the vendor's request
out; the vendor's answer (whole or streamed) in, an OpenAI chat completion (or OpenAI error) out.
The transport shell (smg.pipeline.backends.http and the relay) moves the bytes.

`provider(name, now)` is the registry (`now`: the wall clock the answers' `created` reads);
`PROVIDERS` the names it knows.
"""

from __future__ import annotations

from collections.abc import Callable

from smg.pipeline.providers.anthropic import AnthropicProvider
from smg.pipeline.providers.base import Provider
from smg.pipeline.providers.gemini import Gemini
from smg.pipeline.providers.openai import OpenAIProvider


def _openai(now: Callable[[], float]) -> Provider:
    return OpenAIProvider()


_FACTORIES: dict[str, Callable[[Callable[[], float]], Provider]] = {
    "openai": _openai,
    "anthropic": AnthropicProvider,
    "gemini": Gemini,
}
PROVIDERS = tuple(_FACTORIES)


class UnknownProvider(ValueError):
    def __init__(self, name: object) -> None:
        super().__init__(f"unknown provider {name!r}: expected one of {', '.join(PROVIDERS)}")


def provider(name: str, now: Callable[[], float]) -> Provider:
    """The provider called `name`; `UnknownProvider` for a name it does not know."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UnknownProvider(name)
    return factory(now)
