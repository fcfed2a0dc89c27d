"""The MCP tool loop of `/v1/responses` end to end: the official `openai` SDK -> gateway (gRPC
mode, `--mcp-config-path`) -> a simulated Qwen3 engine, with two real MCP servers written with the
`mcp` SDK's server side (tests/mcp_client/mcp_servers.py): one the gateway spawns over stdio
(`files`), one over streamable HTTP on a loopback port (`calc`).

The engine's first answer is scripted by `SIM_REPLY:` (tool calls in Qwen's `<tool_call>` form);
its next answers by script rules that match only when the tools' outputs are in the prompt (the
chat template renders them as `<tool_response>` turns): a final answer that names a tool's output
is proof that the output reached the model."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from support.listening import listening
from support.responses_cases import WEATHER

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Gateway, Launcher, free_port

# serial: like tests/mcp_client/test_pool.py, its MCP calls missed their deadlines (the module's
# gateway never got ready in 20 s) in 2 of 4 xdist runs on the shared box; cause not found yet
pytestmark = [pytest.mark.integration, pytest.mark.serial]

MODEL = "Qwen3-8B-sim"
SERVER = str(Path(__file__).parents[1] / "mcp_client" / "mcp_servers.py")
FILES = {"type": "mcp", "server_label": "files"}
CALC = {"type": "mcp", "server_label": "calc"}
SCRIPT = [
    # after echo(ping) and add(2, 40) ran: both outputs are in the prompt
    {"when": "echo: ping", "reply": "The echo said ping and the sum is 42."},
    {"when": "boom: bad input", "reply": "The tool failed: bad input."},
    # a model that never stops calling: each output asks for another call
    {"when": "echo: again", "reply": '<tool_call>\n{"name": "echo", "arguments": {"text": '
     '"again"}}\n</tool_call>'},
    {"when": "<tool_response>\n42\n</tool_response>", "reply": "The sum is 42."},
    {"when": "timed out", "reply": "The tool was too slow."},
    {"when": "Bearer sesame / acme", "reply": "The server knew us."},
]  # fmt: skip


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    said = "".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>\n" for n, a in pairs
    )
    return f"SIM_REPLY: {said.rstrip()}"


@dataclass
class Setup:
    gw: Gateway
    client: openai.OpenAI


@pytest.fixture(scope="module")
def http_mcp() -> Iterator[str]:
    port = free_port()
    with listening([sys.executable, SERVER, "streamable-http", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def files(http_mcp: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the engines' script, the gateway's MCP servers file)."""
    tmp = tmp_path_factory.mktemp("mcp")
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT))
    config = tmp / "mcp.yaml"
    config.write_text(
        "servers:\n"
        f"  - name: files\n    protocol: stdio\n    command: {sys.executable}\n"
        f"    args: [{SERVER}, stdio]\n    request_timeout_secs: 2\n"
        f"  - name: calc\n    protocol: streamable\n    url: {http_mcp}\n"
        "    request_timeout_secs: 5\n"
    )
    return script, config


@pytest.fixture(scope="module")
def setup(module_launch: Launcher, files: tuple[Path, Path]) -> Iterator[Setup]:
    script, config = files
    engine = module_launch.engine(MODEL, "vllm", chunk_tokens=3, script=script)
    gw = module_launch.gateway(
        [engine], tokenizer_path=qwen3_tokenizer_dir(), mcp_config_path=config
    )
    with gw.client(timeout_s=30.0) as client:
        yield Setup(gw, client)


def kinds(response: Any) -> list[str]:
    return [item.type for item in response.output]


def test_the_models_calls_reach_both_servers_and_their_outputs_reach_the_model(
    setup: Setup,
) -> None:
    said = calls(("echo", {"text": "ping"}), ("add", {"a": 2, "b": 40}))
    response = setup.client.responses.create(model=MODEL, input=said, tools=[FILES, CALC])
    assert response.status == "completed"
    assert kinds(response) == [
        "mcp_list_tools",
        "mcp_list_tools",
        "mcp_call",
        "mcp_call",
        "message",
    ]
    listed = {item.server_label: {t.name for t in item.tools} for item in response.output[:2]}
    assert {"echo", "add", "fail"} <= listed["files"] and {"echo", "add"} <= listed["calc"]
    echo, add = response.output[2], response.output[3]
    # the first server to offer a name keeps it: echo and add are `files`' (stdio)
    assert (echo.server_label, echo.name, echo.output, echo.error) == (
        "files", "echo", "echo: ping", None,
    )  # fmt: skip
    assert (add.name, json.loads(add.arguments), add.output) == ("add", {"a": 2, "b": 40}, "42")
    assert echo.id.startswith("mcp_") and echo.status == "completed"
    assert response.output_text == "The echo said ping and the sum is 42."
    # usage adds both rounds: the second prompt holds the first, and the outputs
    assert response.usage is not None and response.usage.input_tokens > 2 * len(said) // 8
    # the response object echoes the client's tools, not the functions the model was shown
    assert [t.type for t in response.tools] == ["mcp", "mcp"]
    stored = setup.client.responses.retrieve(response.id)
    assert kinds(stored) == kinds(response)
    assert setup.gw.metric(
        "smg_mcp_tool_calls_total", server="files", tool_name="echo", result="ok"
    )


def test_a_streamed_loop_equals_the_whole_one(setup: Setup) -> None:
    said = calls(("add", {"a": 2, "b": 40}))
    whole = setup.client.responses.create(model=MODEL, input=said, tools=[CALC])
    events: list[Any] = []
    with setup.client.responses.stream(model=MODEL, input=said, tools=[CALC]) as stream:
        for event in stream:
            events.append(event)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.count("response.created") == 1 and types[-1] == "response.completed"
    for kind in (
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_text.delta",
    ):
        assert kind in types, kind
    assert types.index("response.mcp_call.completed") < types.index("response.output_text.delta")

    def shape(r: Any) -> list[dict[str, Any]]:
        items = [i.model_dump(exclude_none=True) for i in r.output]
        for item in items:
            item.pop("id")
            for part in item.get("content", []):
                part.pop("parsed", None)  # the stream helper's parsed text
        return items

    assert shape(final) == shape(whole)
    assert final.output_text == whole.output_text == "The sum is 42."
    assert final.usage is not None and whole.usage is not None  # (the cache differs: 2nd run)
    counts = lambda u: (u.input_tokens, u.output_tokens, u.total_tokens)  # noqa: E731
    assert counts(final.usage) == counts(whole.usage)


def test_a_failing_tool_is_an_output_the_model_sees(setup: Setup) -> None:
    said = calls(("fail", {"message": "bad input"}))
    response = setup.client.responses.create(model=MODEL, input=said, tools=[FILES])
    call = response.output[1]
    said = "Error executing tool fail: boom: bad input"
    assert (call.type, call.status, call.output) == ("mcp_call", "failed", said)
    assert call.error is not None and call.error.type == "mcp_tool_execution_error"
    assert response.status == "completed"
    assert response.output_text == "The tool failed: bad input."
    assert setup.gw.metric(
        "smg_mcp_tool_calls_total", server="files", tool_name="fail", result="tool_error"
    )


def test_max_tool_calls_ends_a_model_that_never_stops(setup: Setup) -> None:
    said = calls(("echo", {"text": "again"}))
    response = setup.client.responses.create(
        model=MODEL, input=said, tools=[FILES], max_tool_calls=3
    )
    assert response.status == "failed"
    assert response.error is not None and response.error.code == "max_tool_calls_exceeded"
    done = [i for i in response.output if i.type == "mcp_call"]
    assert [i.status for i in done] == ["completed"] * 3 + ["failed"]


def test_a_call_needing_approval_waits_for_the_client_then_runs(setup: Setup) -> None:
    ask = {**CALC, "require_approval": "always"}
    first = setup.client.responses.create(
        model=MODEL, input=calls(("add", {"a": 2, "b": 40})), tools=[ask]
    )
    assert kinds(first) == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert (request.name, request.server_label) == ("add", "calc")
    second = setup.client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[ask],
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id,
                "approve": True}],
    )  # fmt: skip
    assert kinds(second) == ["mcp_list_tools", "mcp_call", "message"]
    call = second.output[1]
    assert (call.approval_request_id, call.output) == (request.id, "42")
    assert second.output_text == "The sum is 42."


def test_mcp_tools_the_gateway_cannot_serve_are_a_400(setup: Setup) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.create(
            model=MODEL, input="hi", tools=[{"type": "mcp", "server_label": "nowhere"}]
        )
    assert info.value.code == "mcp_server_not_found"
    assert info.value.param == "tools[0].server_label"


def test_a_function_call_goes_to_the_client_after_the_mcp_calls_of_its_round_ran(
    setup: Setup,
) -> None:
    said = calls(("echo", {"text": "ping"}), ("get_weather", {"city": "Oslo"}))
    response = setup.client.responses.create(model=MODEL, input=said, tools=[WEATHER, FILES])
    assert kinds(response) == ["mcp_list_tools", "mcp_call", "function_call"]
    assert response.status == "completed" and response.output[1].output == "echo: ping"
    call = response.output[2]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"})


def test_a_tool_past_its_deadline_is_an_output_the_model_sees(setup: Setup) -> None:
    said = calls(("nap", {"seconds": 30}))
    started = time.monotonic()
    response = setup.client.responses.create(model=MODEL, input=said, tools=[FILES])
    assert time.monotonic() - started < 20  # the server's 2 s deadline, not the tool's 30 s
    call = response.output[1]
    assert (call.status, call.error.type) == ("failed", "mcp_protocol_error")  # type: ignore[union-attr]
    assert "timed out" in (call.output or "")
    assert response.output_text == "The tool was too slow."


def test_the_loop_in_http_mode(module_launch: Launcher, files: tuple[Path, Path]) -> None:
    """HTTP mode: a worker's chat answers (its tool calls parsed by the worker, as vLLM's tool
    parser would) are read back round after round; whole and streamed alike."""
    script, config = files
    worker = module_launch.sim(MODEL, script=script)
    gw = module_launch.gateway([worker], mcp_config_path=config)
    said = calls(("echo", {"text": "ping"}), ("add", {"a": 2, "b": 40}))
    with gw.client(timeout_s=30.0) as client:
        whole = client.responses.create(model=MODEL, input=said, tools=[FILES, CALC])
        with client.responses.stream(model=MODEL, input=said, tools=[FILES, CALC]) as stream:
            types = [event.type for event in stream]
            streamed = stream.get_final_response()
    for response in (whole, streamed):
        assert kinds(response) == [
            "mcp_list_tools", "mcp_list_tools", "mcp_call", "mcp_call", "message"
        ]  # fmt: skip
        assert [i.output for i in response.output[2:4]] == ["echo: ping", "42"]
        assert response.output_text == "The echo said ping and the sum is 42."
    assert types.count("response.mcp_call.completed") == 2 and types[-1] == "response.completed"


def test_a_server_given_by_url_serves_this_request_with_its_headers(
    setup: Setup, http_mcp: str
) -> None:
    remote = {
        "type": "mcp", "server_label": "remote", "server_url": http_mcp,
        "headers": {"X-Tenant": "acme"}, "authorization": "sesame",
    }  # fmt: skip
    response = setup.client.responses.create(
        model=MODEL, input=calls(("whoami", {})), tools=[remote]
    )
    assert kinds(response) == ["mcp_list_tools", "mcp_call", "message"]
    assert response.output[1].output == "Bearer sesame / acme"  # the headers reached it
    assert response.output_text == "The server knew us."
    shown = response.tools[0].model_dump()
    assert shown["headers"] is None and "sesame" not in str(shown)  # never echoed back
    assert setup.gw.metric(
        "smg_mcp_tool_calls_total", server="request", tool_name="any", result="ok"
    )


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/mcp", "http://user:pw@127.0.0.1:1/mcp", "ftp://127.0.0.1/x"]
)
def test_a_server_url_the_gateway_refuses_is_a_400(setup: Setup, url: str) -> None:
    tool = {"type": "mcp", "server_label": "remote", "server_url": url}
    with pytest.raises(openai.BadRequestError) as info:
        setup.client.responses.create(model=MODEL, input="hi", tools=[tool])
    assert info.value.param == "tools[0].server_url"
    assert "pw" not in str(info.value.body)
