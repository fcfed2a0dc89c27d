"""The process shell every entry point shares (`smg`, `smg sim`, `smg dev`, `python -m
smg.sim.grpc_cli`): the event loop (uvloop when installed), the signals that stop it, and a
helper that runs a server until told to stop. It sits below both the CLI and the simulator so
neither has to import the other.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any


def install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_until_signal(main: Callable[[asyncio.Event], Any]) -> None:
    """Run `main(stop)`; SIGTERM/SIGINT set `stop` (a second signal exits at once). SIGHUP, whose
    default action kills the process (a closed terminal, a reload habit), is logged and ignored:
    there is nothing to reload, and streams in flight must not die for it."""
    install_uvloop()

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if stop.is_set():
                os._exit(130)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        loop.add_signal_handler(signal.SIGHUP, _on_hangup)
        await main(stop)

    asyncio.run(runner())


def _on_hangup() -> None:
    import structlog

    structlog.get_logger("smg").warning("sighup_ignored", detail="nothing to reload; still serving")


async def until_stopped(serve: Callable[[], Coroutine[Any, Any, Any]], stop: asyncio.Event) -> None:
    """Run `serve()` (which runs until cancelled) until `stop` is set."""
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(serve())
        await stop.wait()
        task.cancel()
