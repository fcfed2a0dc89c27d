"""The plumbing a surface's renderer shares (pure; no IO): one state machine fed either way.

A renderer built on `FramedShaper` writes its events through `_event`-style appends to
`self._frames`: a list while a stream's frames are being made, None for a whole answer (the
very same machine runs, events are dropped). The flow's renderer interface
(smg/flow/render.py) then comes down to three steps a surface writes: `_feed` (an engine
event), `_chat` (an HTTP worker's chat step), `_end` (the answer ended).
"""

from __future__ import annotations

from typing import Any

from smg.pipeline.chat_answer import ChatStep
from smg.pipeline.choice import ChoiceState
from smg.pipeline.engine_types import EngineEvent


class FramedShaper:
    state: ChoiceState
    _frames: list[bytes] | None

    @property
    def all_done(self) -> bool:
        return self.state.done

    def on_event(self, ev: EngineEvent) -> list[bytes]:
        self._frames = frames = list[bytes]()
        self._feed(ev)
        return frames

    def closing_frames(self) -> list[bytes]:
        self._frames = frames = list[bytes]()
        self._end()
        return frames

    def collect(self, ev: EngineEvent) -> None:
        self._frames = None
        self._feed(ev)

    # --- HTTP mode: a worker's chat answer -------------------------------------------------------
    def chat_frames(self, step: ChatStep) -> list[bytes]:
        """The events of one streamed chat chunk (closing_frames ends the stream)."""
        self._frames = frames = list[bytes]()
        self._chat(step)
        return frames

    def collect_chat(self, step: ChatStep) -> None:
        self._frames = None
        self._chat(step)

    # --- what a surface writes -------------------------------------------------------------------
    def _feed(self, ev: EngineEvent) -> None:
        raise NotImplementedError

    def _chat(self, step: ChatStep) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


def usage_count(obj: Any, name: str) -> int:
    """A count in a worker's `usage` (0 when absent or not a count)."""
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0
