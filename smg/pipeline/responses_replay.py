"""A stored response object → the typed Responses event stream (pure; no IO).

`GET /v1/responses/{id}?stream=true` replays a finished response from what storage holds: its
response object. The events are the ones a live stream of that response sent
(smg.pipeline.responses_output), re-derived: `response.created` and `response.in_progress`
(the response as it began: status in_progress, no output, no usage), then per output item
`response.output_item.added`, for a message / reasoning item `response.content_part.added`,
ONE delta carrying the item's whole text (a live stream sent it in pieces), the `.done`s,
`response.output_item.done`, and the terminal event of its status (`response.completed`,
`response.incomplete`, `response.failed`; a cancelled or unfinished response has none).
Sequence numbers count from 0, as a live stream's do; `starting_after` keeps only later ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

Event = dict[str, Any]

TERMINAL = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def replay_events(response: Mapping[str, Any]) -> list[Event]:
    """The events a stream of `response` (a response object) sent, numbered from 0."""
    head = {**response, "status": "in_progress", "output": [], "usage": None, "error": None}
    head["incomplete_details"] = None
    events: list[Event] = [
        {"type": "response.created", "response": head},
        {"type": "response.in_progress", "response": dict(head)},
    ]
    for index, item in enumerate(response.get("output") or ()):
        events += _item_events(index, item)
    status = response.get("status")
    if isinstance(status, str) and status in TERMINAL:
        events.append({"type": TERMINAL[status], "response": dict(response)})
    return [{**event, "sequence_number": seq} for seq, event in enumerate(events)]


def after(events: Iterable[Event], starting_after: int | None) -> list[Event]:
    """The events numbered past `starting_after` (all of them for None)."""
    if starting_after is None:
        return list(events)
    return [e for e in events if e["sequence_number"] > starting_after]


def frame(event: Event) -> bytes:
    """One event as its SSE frame (the same bytes a live stream writes)."""
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _item_events(index: int, item: Mapping[str, Any]) -> list[Event]:
    kind = item.get("type")
    item_id = item.get("id")
    where = {"item_id": item_id, "output_index": index}
    if kind == "function_call":
        arguments = str(item.get("arguments") or "")
        added = {**item, "arguments": "", "status": "in_progress"}
        events: list[Event] = [
            {"type": "response.output_item.added", "output_index": index, "item": added}
        ]
        if arguments:
            events.append(
                {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
            )
        events.append(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": item.get("name"),
                "arguments": arguments,
            }
        )
    elif kind in ("message", "reasoning"):
        part = _first_part(item)
        text = str(part.get("text") or "")
        added = {k: v for k, v in item.items() if k != "content"}
        added["status"] = "in_progress"
        if kind == "message":
            added["content"] = []
            empty: Event = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            delta, done, extra = "response.output_text.delta", "response.output_text.done", True
        else:
            empty = {"type": "reasoning_text", "text": ""}
            delta, done = "response.reasoning_text.delta", "response.reasoning_text.done"
            extra = False
        on = {**where, "content_index": 0}
        logprobs: Event = {"logprobs": []} if extra else {}
        events = [
            {"type": "response.output_item.added", "output_index": index, "item": added},
            {"type": "response.content_part.added", **on, "part": empty},
        ]
        if text:
            events.append({"type": delta, **on, "delta": text, **logprobs})
        events += [
            {"type": done, **on, "text": text, **logprobs},
            {"type": "response.content_part.done", **on, "part": part},
        ]
    else:  # an item said whole (an MCP call or listing, ...)
        events = [{"type": "response.output_item.added", "output_index": index, "item": item}]
    events.append({"type": "response.output_item.done", "output_index": index, "item": dict(item)})
    return events


def _first_part(item: Mapping[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        return dict(content[0])
    if item.get("type") == "reasoning":
        return {"type": "reasoning_text", "text": ""}
    return {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
