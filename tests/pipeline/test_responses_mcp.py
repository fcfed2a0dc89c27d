"""MCP tools in Responses (pure parts): the request's MCP entries checked, what the model is
offered, and the renderer carrying one response across the rounds of a tool loop (a paused round,
the calls' outputs, the next round), streamed and whole alike, with the events the SDK's own
models accept and one sequence across rounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from support.responses_cases import QWEN_REPLY, WEATHER

from smg.errors import ApiError
from smg.mcp_client.outputs import McpTool
from smg.pipeline.choice import OutputSpec
from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta
from smg.pipeline.parser_choice import ParserChoice, tool_choice
from smg.pipeline.responses_mcp import Offer, echoed, offer, parse_mcp_tool
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import chat_body, parse_responses
from smg.pipeline.responses_rounds import Rounds, RoundShaper

EVENTS = TypeAdapter(ResponseStreamEvent)
MODEL = "Qwen3-8B"


def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    return "".join(chr(i) for i in ids)


def events_for(text: str, prompt: int) -> list[EngineEvent]:
    ids = [ord(c) for c in text]
    out: list[EngineEvent] = [
        TokenDelta(0, ids[i : i + 3], prompt, min(len(ids), i + 3)) for i in range(0, len(ids), 3)
    ]
    return [*out, Finished(0, "stop", prompt, len(ids))]


# --- the request's MCP entries ------------------------------------------------------------------
def test_an_mcp_entry_is_checked_and_echoed_without_its_credentials() -> None:
    raw = {
        "type": "mcp", "server_label": "wx", "server_url": "https://mcp.example/mcp",
        "headers": {"X-Tenant": "a"}, "authorization": "tok",
        "allowed_tools": {"tool_names": ["get_weather"]},
        "require_approval": {"never": {"tool_names": ["get_weather"]}},
    }  # fmt: skip
    spec = parse_mcp_tool(raw, "tools[0]")
    assert spec.headers == (("X-Tenant", "a"), ("Authorization", "Bearer tok"))
    assert spec.allowed == frozenset({"get_weather"})
    assert not spec.needs_approval("get_weather") and spec.needs_approval("other")
    shown = echoed(raw)
    assert shown["headers"] is None and "authorization" not in shown and "tok" not in str(shown)
    never = parse_mcp_tool({"type": "mcp", "server_label": "wx"}, "t")
    assert not never.needs_approval("anything")  # the Rust gateway's default: no approvals
    some = parse_mcp_tool(
        {"type": "mcp", "server_label": "wx", "require_approval": {"always": ["rm"]}}, "t"
    )
    assert some.needs_approval("rm") and not some.needs_approval("ls")


def tool(server: str, name: str) -> McpTool:
    return McpTool(server, name, f"{name} on {server}", {"type": "object"})


def test_the_model_is_offered_each_name_once_the_clients_own_first() -> None:
    a = parse_mcp_tool({"type": "mcp", "server_label": "a", "require_approval": "always"}, "t")
    b = parse_mcp_tool({"type": "mcp", "server_label": "b", "allowed_tools": ["y", "z"]}, "t")
    listed = {"a": [tool("a", "x"), tool("a", "y")], "b": [tool("b", "y"), tool("b", "z"),
                                                        tool("b", "w")]}  # fmt: skip
    got = offer([a, b], listed, taken=["x"])
    assert [f["function"]["name"] for f in got.functions] == ["y", "z"]
    assert got.owner == {"y": "a", "z": "b"} and got.approval == frozenset({"y"})


def test_the_limits_of_a_loop() -> None:
    rounds = Rounds(Offer((), {}, frozenset()), max_calls=3, max_iterations=2, items=[])
    assert rounds.over(3) is None
    assert rounds.over(4) is not None and rounds.over(4)[0] == "max_tool_calls_exceeded"  # type: ignore[index]
    rounds.iterations = 2
    assert rounds.over(1) is not None and rounds.over(1)[0] == "tool_iterations_exceeded"  # type: ignore[index]


# --- the renderer across rounds ------------------------------------------------------------------
def loop(max_calls: int = 5, approval: bool = False) -> tuple[ResponsesRenderer, dict[str, Any]]:
    req = parse_responses({"model": MODEL, "input": "hi", "tools": [WEATHER]})
    listed = {"id": "mcpl_ab00", "type": "mcp_list_tools", "server_label": "wx",
              "tools": [], "error": None}  # fmt: skip
    given = Offer((), {"get_weather": "wx"}, frozenset({"get_weather"} if approval else ()))
    rounds = Rounds(given, max_calls, 10, [listed], unannounced=1)
    chat = chat_body(req)
    factory = ParserChoice().factory(
        chat, MODEL, "", chat["tools"], tool_choice(chat, chat["tools"]), "e1"
    )
    spec = OutputSpec("e1", MODEL, 1700000000, chat=True, parser=factory)
    render = ResponsesRenderer(req, "resp_ab")
    render.loop = rounds.shaper
    return render, {"spec": spec}


def frames_of(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for f in frames:
        payload = orjson.loads(f.split(b"\n", 1)[1].removeprefix(b"data: "))
        checked = payload
        if payload["type"] == "response.failed":  # the loop's limits fail with the Rust
            # gateway's codes, which the SDK's literal list of codes lacks (it reads them as sent)
            error = {**payload["response"]["error"], "code": "server_error"}
            checked = {**payload, "response": {**payload["response"], "error": error}}
        EVENTS.validate_python(checked)  # the SDK's own event models accept it
        out.append(payload)
    return out


def run_round(s: RoundShaper, text: str, prompt: int, streaming: bool) -> list[bytes]:
    frames: list[bytes] = []
    for ev in events_for(text, prompt):
        if streaming:
            frames += s.on_event(ev)
        else:
            s.collect(ev)
        if s.all_done:
            break
    if streaming:
        return frames + s.closing_frames()
    s.whole()
    return []


@pytest.mark.parametrize("streaming", [True, False])
def test_two_rounds_are_one_response(streaming: bool) -> None:
    render, kw = loop()
    first = render(kw["spec"], decode, lambda: 0.0)
    frames = run_round(first, QWEN_REPLY, 10, streaming)
    assert first.paused and first.final == {}
    frames += first.tool_results([("5C", None)], streaming)
    assert not first.calls_for_client
    first.carry()
    second = render(kw["spec"], decode, lambda: 0.0)
    frames += run_round(second, "It is 5C in Oslo.", 30, streaming)
    final = second.final
    Response.model_validate(final)
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == [
        "mcp_list_tools", "reasoning", "message", "mcp_call", "message"
    ]  # fmt: skip
    call = final["output"][3]
    assert (call["id"], call["name"], call["server_label"]) == ("mcp_ab03", "get_weather", "wx")
    assert (orjson.loads(call["arguments"]), call["output"], call["status"]) == (
        {"city": "Oslo"}, "5C", "completed",
    )  # fmt: skip
    assert final["usage"]["input_tokens"] == 40  # both rounds' prompts
    assert final["usage"]["output_tokens"] == len(QWEN_REPLY) + len("It is 5C in Oslo.")
    if not streaming:
        return
    events = frames_of(frames)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:6] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]  # fmt: skip
    assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    at = types.index("response.mcp_call.completed")
    assert types[at + 1] == "response.output_item.done" and events[at + 1]["item"]["output"] == "5C"
    assert events[-1]["response"] == final


def test_a_round_past_max_tool_calls_fails_the_response() -> None:
    render, kw = loop(max_calls=0)
    s = render(kw["spec"], decode, lambda: 0.0)
    events = frames_of(run_round(s, QWEN_REPLY, 10, True))
    assert not s.paused and events[-1]["type"] == "response.failed"
    final = events[-1]["response"]
    assert final["error"]["code"] == "max_tool_calls_exceeded"
    assert final["output"][-1]["status"] == "failed"


def test_a_call_needing_approval_ends_the_response_with_the_request() -> None:
    render, kw = loop(approval=True)
    s = render(kw["spec"], decode, lambda: 0.0)
    events = frames_of(run_round(s, QWEN_REPLY, 10, True))
    assert not s.paused and events[-1]["type"] == "response.completed"
    ask = events[-1]["response"]["output"][-1]
    assert ask["type"] == "mcp_approval_request" and ask["id"] == "mcpr_ab03"
    assert orjson.loads(ask["arguments"]) == {"city": "Oslo"}


def test_a_failure_between_rounds_ends_the_stream_as_failed() -> None:
    render, kw = loop()
    s = render(kw["spec"], decode, lambda: 0.0)
    run_round(s, QWEN_REPLY, 10, True)
    s.tool_results([("5C", None)], True)
    s.carry()
    events = frames_of(s.fail(ApiError(503, "no_healthy_worker", "no worker"), True))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["output"][3]["status"] == "completed"  # the call that ran


def test_a_cancelled_loop_marks_its_unrun_calls() -> None:
    render, kw = loop()
    s = render(kw["spec"], decode, lambda: 0.0)
    run_round(s, QWEN_REPLY, 10, False)
    body = s.cancelled()
    assert body["status"] == "cancelled" and body["output"][3]["status"] == "incomplete"


def test_round_items_keep_their_ids() -> None:
    render, kw = loop()
    s = render(kw["spec"], decode, lambda: 0.0)
    run_round(s, QWEN_REPLY, 10, False)
    ids = [i["id"] for i in s.items]
    assert ids == ["mcpl_ab00", "rs_ab01", "msg_ab02", "mcp_ab03"]
    assert dataclasses.replace(s.spec).response_id == "e1"
