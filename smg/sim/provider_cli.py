"""`smg sim --provider NAME`: the stand-in of that vendor, served until cancelled."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from smg.config import SimConfig
from smg.sim import gemini_standin, provider_anthropic, provider_openai
from smg.sim.provider_common import serve

BUILDERS: dict[str, Callable[[SimConfig], web.Application]] = {
    "openai": provider_openai.build_app,
    "anthropic": provider_anthropic.build_app,
    "gemini": gemini_standin.build_app,
}


async def serve_provider(cfg: SimConfig) -> None:
    assert cfg.provider is not None
    await serve(BUILDERS[cfg.provider], cfg)
