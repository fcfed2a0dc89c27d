"""OpenAI's `response` object (pure): the request's settings echoed as they apply, the status,
the output items and usage, and what a failed response says. The renderer (responses_output.py)
builds it as a stream or a whole answer ends; the edge builds a cancelled one."""

from __future__ import annotations

from typing import Any

from smg.errors import ApiError
from smg.pipeline.responses_request import ResponsesRequest


def usage_object(prompt: int, cached: int, output: int, reasoning: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        # cache_write_tokens: engines do not report it (the SDK's model requires the field)
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": min(reasoning, output)},
        "total_tokens": prompt + output,
    }


def failure(err: ApiError | None) -> dict[str, str]:
    """What a failed response says (what the engine said goes to the log, not the client)."""
    if err is not None:
        return {"code": "server_error", "message": err.message}
    return {"code": "server_error", "message": "The engine failed while generating the response"}


def response_object(
    req: ResponsesRequest,
    response_id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    *,
    error: dict[str, str] | None = None,
) -> dict[str, Any]:
    """OpenAI's `response` object for `req` (the request's settings echoed as they apply)."""
    reasoning = req.reasoning or {"effort": None, "summary": None}
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": req.background,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": reasoning,
        "service_tier": "default",
        "store": req.store,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": {"format": req.text_format},
        "tool_choice": req.tool_choice,
        "tools": list(req.echo_tools),
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "truncation": "disabled",
        "usage": usage,
        "user": req.user,
        "metadata": req.metadata,
        "conversation": None if req.conversation is None else {"id": req.conversation},
        **req.echo,
    }
