"""One Responses answer across the model rounds of a tool loop (pure; no IO).

The MCP tool loop (smg.api.responses_loop) runs a response as rounds: the model answers, the
gateway runs the MCP calls it made, the model answers again with their outputs. `Rounds` is what
the response carries from round to round (its output items, its event sequence, its usage, the
limits); each round's renderer is a `RoundShaper`, the Responses renderer
(smg.pipeline.responses_output) with the loop's kinds of items:

    mcp_list_tools         a server's tools, made before the first round     mcpl_…
    mcp_call               a call the gateway runs                           mcp_…
    mcp_approval_request   a call that waits for the client's approval      mcpr_…

A round that ends in MCP calls *pauses*: no terminal event, its calls' items still open (their
arguments done). The loop runs the calls (`tool_results`: each item completed or failed, with its
`response.mcp_call.completed|failed` and `output_item.done`), then either `carry`s on to the next
round, or `conclude`s (the round also asked the client for something), or `fail`s (the next round
could not start). Past a limit, the round ends the response as failed (the Rust gateway's codes
`tool_iterations_exceeded`, `max_tool_calls_exceeded`) with its calls not run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from smg.errors import ApiError
from smg.pipeline.choice import OutputSpec
from smg.pipeline.detokenize import DecodeFn
from smg.pipeline.responses_mcp import Offer, call_error, call_result
from smg.pipeline.responses_object import usage_object
from smg.pipeline.responses_output import CALL, PREFIX, ResponsesShaper
from smg.pipeline.responses_request import ResponsesRequest

MCP, APPROVAL, LISTED = "mcp_call", "mcp_approval_request", "mcp_list_tools"


@dataclass(slots=True)
class Rounds:
    """One response's state across the model rounds of its tool loop: each round's renderer
    starts from it (output items so far, the event sequence, usage) and the loop updates it."""

    offer: Offer
    max_calls: int  # MCP calls the response may run (max_tool_calls)
    max_iterations: int  # rounds that may end in MCP calls
    items: list[dict[str, Any]] = field(default_factory=list)  # shared with the round's renderer
    unannounced: int = 0  # items at the front made before the first round (list_tools, ...)
    seq: int = 0
    begun: bool = False
    calls: int = 0  # MCP calls run so far
    iterations: int = 0  # rounds whose MCP calls were run
    prompt_tokens: int = 0  # usage of the finished rounds
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    # streaming: the one SSE body every round writes to (smg.flow.render.sse_response)
    open_stream: Callable[[dict[str, str]], Any] | None = None

    def over(self, pending: int) -> tuple[str, str] | None:
        """(code, message) when running `pending` more calls would pass a limit."""
        if self.iterations >= self.max_iterations:
            return (
                "tool_iterations_exceeded",
                f"The model kept calling MCP tools past {self.max_iterations} rounds",
            )
        if self.calls + pending > self.max_calls:
            return (
                "max_tool_calls_exceeded",
                f"The model asked for more than max_tool_calls ({self.max_calls}) MCP calls",
            )
        return None

    def shaper(
        self, req: ResponsesRequest, response_id: str, spec: OutputSpec, decode: DecodeFn
    ) -> RoundShaper:
        """The renderer of the next round (a `ShaperFactory`)."""
        return RoundShaper(req, response_id, spec, decode, self)


class RoundShaper(ResponsesShaper):
    prefixes = {**PREFIX, MCP: "mcp_", APPROVAL: "mcpr_", LISTED: "mcpl_"}

    def __init__(
        self,
        req: ResponsesRequest,
        response_id: str,
        spec: OutputSpec,
        decode: DecodeFn,
        rounds: Rounds,
    ) -> None:
        super().__init__(req, response_id, spec, decode)
        self.rounds = rounds
        self.items = rounds.items  # earlier rounds' items come first
        self.texts = [[] for _ in self.items]
        self.first = len(self.items)  # this round's first item
        self.seq, self.begun = rounds.seq, rounds.begun
        self.pending: list[int] = []  # this round's MCP calls, waiting for their outputs
        self.paused = False  # this round ended in MCP calls the loop runs (no terminal event)
        self.open_stream = rounds.open_stream

    # --- the base renderer's hooks ---------------------------------------------------------------
    def _add_call(self, call_id: str, name: str) -> int:
        """An `mcp_call` when the gateway runs the tool (an `mcp_approval_request` when it waits
        for the client's approval), else a `function_call` for the client."""
        offer = self.rounds.offer
        label = offer.owner.get(name)
        if label is None:
            return super()._add_call(call_id, name)
        if name in offer.approval:
            return self._add(APPROVAL, {"server_label": label, "name": name, "arguments": ""})
        fields = {"server_label": label, "name": name, "arguments": "", "output": None}
        index = self._add(MCP, {**fields, "error": None, "approval_request_id": None})
        self._event(
            "response.mcp_call.in_progress", item_id=self.items[index]["id"], output_index=index
        )
        return index

    def _arguments_event(self, kind: str) -> str | None:
        if kind == MCP:
            return "response.mcp_call_arguments.delta"
        return None if kind == APPROVAL else super()._arguments_event(kind)

    def _close_other(self, index: int, text: str) -> bool:
        item = self.items[index]
        if item["type"] == MCP:
            item["arguments"] = text
            self._event(
                "response.mcp_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=text,
            )
            self.pending.append(index)  # its output_item.done comes with its output
            return True
        if item["type"] == APPROVAL:
            item["arguments"] = text
            item.pop("status", None)
            self._event("response.output_item.done", output_index=index, item=item)
            return True
        return False

    def _announce_first(self) -> None:
        """The items made before the first round (a server's tool list, a call the client
        approved), each with its whole event sequence."""
        for index in range(self.rounds.unannounced):
            item = self.items[index]
            item_id, kind = item["id"], item["type"]
            self._event("response.output_item.added", output_index=index, item=item)
            if kind == LISTED:
                self._event(
                    "response.mcp_list_tools.in_progress", item_id=item_id, output_index=index
                )
                done = "failed" if item.get("error") else "completed"
                self._event(f"response.mcp_list_tools.{done}", item_id=item_id, output_index=index)
            elif kind == MCP:
                self._event("response.mcp_call.in_progress", item_id=item_id, output_index=index)
                self._event(
                    "response.mcp_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    arguments=item["arguments"],
                )
                status = item["status"]
                self._event(f"response.mcp_call.{status}", item_id=item_id, output_index=index)
            self._event("response.output_item.done", output_index=index, item=item)

    def _unfinished(self, status: str, why: str) -> None:
        """This round's MCP calls end without being run."""
        for index in self.pending:
            item = self.items[index]
            item["status"], item["error"] = status, call_error("not_run", why)
            self._event("response.output_item.done", output_index=index, item=item)
        self.pending = []

    def _pause(self) -> bool:
        if not self.pending:
            return False
        over = self.rounds.over(len(self.pending))
        if over is None:
            self.paused = True  # the loop runs the calls, then goes on (or concludes)
            return True
        code, message = over
        self._unfinished("failed", message)
        self.final = self.response("failed", None, error={"code": code, "message": message})
        self._event("response.failed", response=self.final)
        return True

    def usage(self) -> dict[str, Any]:
        r = self.rounds
        return usage_object(
            r.prompt_tokens + self.prompt_tokens, r.cached_tokens + self.cached_tokens,
            r.completion_tokens + self.state.completion_tokens,
            r.reasoning_tokens + self.reasoning_tokens,
        )  # fmt: skip

    # --- the loop's steps between rounds ---------------------------------------------------------
    @property
    def calls_for_client(self) -> bool:
        """This round asked the client for something (a function call, an approval): the
        response ends once its MCP calls have run."""
        return any(i["type"] in (CALL, APPROVAL) for i in self.items[self.first :])

    def tool_results(
        self, outputs: Sequence[tuple[str, str | None]], streaming: bool
    ) -> list[bytes]:
        """The outputs (text, error code or None) of the paused round's MCP calls, in order:
        each call's item completed, and its events."""
        frames = self._writing(streaming)
        for index, (text, code) in zip(self.pending, outputs, strict=True):
            item = self.items[index]
            call_result(item, text, code)
            kind = "completed" if code is None else "failed"
            self._event(f"response.mcp_call.{kind}", item_id=item["id"], output_index=index)
            self._event("response.output_item.done", output_index=index, item=item)
        self.pending = []
        return frames

    def conclude(self, streaming: bool) -> list[bytes]:
        """End a paused response (its calls have run; the client has calls to answer)."""
        frames = self._writing(streaming)
        self.paused = False
        self.final = self.response("completed", None)
        self._event("response.completed", response=self.final)
        return frames

    def fail(self, err: ApiError, streaming: bool) -> list[bytes]:
        """End the response as failed between rounds (the next round could not start)."""
        frames = self._writing(streaming)
        self._unfinished("incomplete", "The response failed before the call was run")
        self.paused = False
        self.ended = True
        self.final = self.response("failed", err)
        self._event("response.failed", response=self.final)
        return frames

    def carry(self) -> None:
        """Hand this round's sequence and usage to the next round (and count them only there)."""
        r = self.rounds
        r.seq, r.begun = self.seq, self.begun
        r.prompt_tokens += self.prompt_tokens
        r.cached_tokens += self.cached_tokens
        r.completion_tokens += self.state.completion_tokens
        r.reasoning_tokens += self.reasoning_tokens
        self.prompt_tokens = self.cached_tokens = self.reasoning_tokens = 0
        self.state.completion_tokens = 0

    def _writing(self, streaming: bool) -> list[bytes]:
        """Events from here on go to the list returned (or nowhere: a whole answer)."""
        frames: list[bytes] = []
        self._frames = frames if streaming else None
        return frames
