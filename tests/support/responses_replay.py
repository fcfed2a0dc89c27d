"""A live Responses stream as its replay says it: each item's deltas joined into one."""

from __future__ import annotations

from typing import Any

DELTAS = (
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
)


def merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` with each item's run of deltas joined into one, renumbered from 0."""
    out: list[dict[str, Any]] = []
    for event in events:
        event = {k: v for k, v in event.items() if k != "sequence_number"}
        last = out[-1] if out else None
        if (
            event["type"] in DELTAS
            and last is not None
            and last["type"] == event["type"]
            and last["item_id"] == event["item_id"]
        ):
            last["delta"] += event["delta"]
            continue
        out.append(event)
    return [{**e, "sequence_number": n} for n, e in enumerate(out)]
