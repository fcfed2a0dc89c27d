"""Fakes shared by the policy tests: candidate workers and an injected clock."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class W:
    worker_id: str
    load: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.worker_id}:8000"


def workers(*loads: int) -> list[W]:
    return [W(f"w{i}", load) for i, load in enumerate(loads)]
