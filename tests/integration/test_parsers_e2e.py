"""Reasoning and tool-call parsing end to end: the `openai` SDK -> gateway (gRPC mode) ->
simulated engines that answer exactly the text after `SIM_REPLY:`.

Design: ONE gateway with no `--tool-call-parser` / `--reasoning-parser`, in front of one engine
per tool-call family. Each engine reports a model name that the detection tables map to its
family (checked by `test_model_names_detect_the_intended_families`, so a table change fails
loudly here rather than as a puzzling parse). Reasoning families share the engines whose names
also detect them (Qwen3 -> qwen3, Kimi-K2 -> kimi, command-r -> cohere_cmd, DeepSeek-R1 ->
deepseek_r1 with pythonic tools). All engines start in parallel and stream one token per message,
so markers are split as finely as the tokenizer allows. The gateway loads the bundled Qwen3
tokenizer once (`--tokenizer-path`) for every model: nothing is downloaded.

Every case is checked non-streamed and streamed: the streamed deltas, aggregated as an OpenAI
client does (content concatenated, tool-call deltas merged by index), must equal the message,
and no delta may carry marker text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from smg.pipeline.parsers import detect_reasoning_parser, detect_tool_parser
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Engine, Gateway, Launcher, ProcessDied, assert_openai_error, wait_until

ENGINES_DEADLINE_S = 90.0  # all engines together, on 2 busy cores

# model name -> (tool family, reasoning family) the detection tables must give it
MODELS: dict[str, tuple[str, str | None]] = {
    "gpt-4o-sim": ("json", None),
    "llama-3.1-sim": ("llama", None),
    "DeepSeek-R1-sim": ("pythonic", "deepseek_r1"),
    "Qwen3-8B-sim": ("qwen", "qwen3"),
    "Qwen3-Coder-sim": ("qwen_xml", "qwen3"),
    "Mistral-Large-sim": ("mistral", None),
    "DeepSeek-V3-sim": ("deepseek", None),
    "DeepSeek-V3.1-sim": ("deepseek31", None),
    "Kimi-K2-sim": ("kimik2", "kimi"),
    "GLM-4.5-sim": ("glm45_moe", "glm45"),
    "GLM-4.7-sim": ("glm47_moe", "glm45"),
    "step3-sim": ("step3", "step3"),
    "MiniMax-M2-sim": ("minimax_m2", "minimax"),
    "command-r-sim": ("cohere", "cohere_cmd"),
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    },
]
WEATHER = ("get_weather", {"city": "Oslo", "days": 3})
TIME = ("get_time", {"zone": "CET"})
W_JSON = '{"city": "Oslo", "days": 3}'

BAR, LOW = "\uff5c", "\u2581"  # DeepSeek / Step-3 markers use these, not "|" and "_"
DS_CALLS_BEGIN = f"<{BAR}tool{LOW}calls{LOW}begin{BAR}>"
DS_CALLS_END = f"<{BAR}tool{LOW}calls{LOW}end{BAR}>"
DS_CALL_BEGIN = f"<{BAR}tool{LOW}call{LOW}begin{BAR}>"
DS_CALL_END = f"<{BAR}tool{LOW}call{LOW}end{BAR}>"
DS_SEP = f"<{BAR}tool{LOW}sep{BAR}>"
ST_CALLS_BEGIN = f"<{BAR}tool_calls_begin{BAR}>"
ST_CALLS_END = f"<{BAR}tool_calls_end{BAR}>"
ST_CALL_BEGIN = f"<{BAR}tool_call_begin{BAR}>"
ST_CALL_END = f"<{BAR}tool_call_end{BAR}>"
ST_SEP = f"<{BAR}tool_sep{BAR}>"
K_SECTION_BEGIN, K_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CALL_BEGIN, K_CALL_END = "<|tool_call_begin|>", "<|tool_call_end|>"
K_ARGS = "<|tool_call_argument_begin|>"

# No content or reasoning delta may contain any of these (whole or as the split-off start).
MARKERS = (
    "<think>", "</think>", "\u25c1think\u25b7", "\u25c1/think\u25b7",
    "<|START_THINKING|>", "<|END_THINKING|>",
    "<tool_call>", "</tool_call>", "<function=", "<parameter", "<arg_key>", "<arg_value>",
    "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "```json",
    DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP,
    ST_CALLS_BEGIN, ST_CALLS_END, ST_CALL_BEGIN, ST_CALL_END, ST_SEP, "<steptml:",
    K_SECTION_BEGIN, K_SECTION_END, K_CALL_BEGIN, K_CALL_END, K_ARGS, "functions.",
    "<minimax:tool_call>", "</minimax:tool_call>", "<invoke",
    "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    reply: str  # exactly what the engine says
    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    tools: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # more request fields (SDK arguments)
    extra_body: dict[str, Any] = field(default_factory=dict)  # fields the SDK does not know

    @property
    def finish(self) -> str:
        return "tool_calls" if self.calls else "stop"


TOOL_CASES = [
    Case(
        "json",
        "gpt-4o-sim",
        f'[{{"name": "get_weather", "arguments": {W_JSON}}}, '
        '{"name": "get_time", "parameters": {"zone": "CET"}}]',
        calls=(WEATHER, TIME),
    ),
    Case(
        "llama",
        "llama-3.1-sim",
        f'Let me check.<|python_tag|>{{"name": "get_weather", "parameters": {W_JSON}}}',
        content="Let me check.",
        calls=(WEATHER,),
    ),
    Case(
        "pythonic+deepseek_r1",
        "DeepSeek-R1-sim",
        'Both are needed.</think>Checking both. [get_weather(city="Oslo", days=3), '
        'get_time(zone="CET")]',
        content="Checking both.",
        reasoning="Both are needed.",
        calls=(WEATHER, TIME),
    ),
    Case(
        "qwen+qwen3",
        "Qwen3-8B-sim",
        "<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n"
        f'{{"name": "get_weather", "arguments": {W_JSON}}}\n</tool_call>',
        content="Let me look.",
        reasoning="The user wants the weather.",
        calls=(WEATHER,),
    ),
    Case(
        "qwen_coder",
        "Qwen3-Coder-sim",
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        content="Let me check.",
        calls=(WEATHER,),
    ),
    Case(
        "mistral_array",
        "Mistral-Large-sim",
        f'[TOOL_CALLS] [{{"name": "get_weather", "arguments": {W_JSON}}}]',
        calls=(WEATHER,),
    ),
    Case(
        "mistral_v11",
        "Mistral-Large-sim",
        f'Sure.[TOOL_CALLS]get_weather[ARGS]{W_JSON}[TOOL_CALLS]get_time[ARGS]{{"zone": "CET"}}',
        content="Sure.",
        calls=(WEATHER, TIME),
    ),
    Case(
        "deepseek_v3",
        "DeepSeek-V3-sim",
        f"Looking it up.{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}get_weather\n```json\n"
        f"{W_JSON}\n```{DS_CALL_END}{DS_CALLS_END}",
        content="Looking it up.",
        calls=(WEATHER,),
    ),
    Case(
        "deepseek31",
        "DeepSeek-V3.1-sim",
        f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get_weather{DS_SEP}{W_JSON}{DS_CALL_END}"
        f'{DS_CALL_BEGIN}get_time{DS_SEP}{{"zone": "CET"}}{DS_CALL_END}{DS_CALLS_END}',
        calls=(WEATHER, TIME),
    ),
    Case(
        "kimik2+kimi",
        "Kimi-K2-sim",
        "\u25c1think\u25b7Weather, then answer.\u25c1/think\u25b7On it."
        f"{K_SECTION_BEGIN}{K_CALL_BEGIN}functions.get_weather:0{K_ARGS}{W_JSON}{K_CALL_END}"
        f'{K_CALL_BEGIN}functions.get_time:1{K_ARGS}{{"zone": "CET"}}{K_CALL_END}{K_SECTION_END}',
        content="On it.",
        reasoning="Weather, then answer.",
        calls=(WEATHER, TIME),
    ),
    Case(
        "glm45_moe+glm45",
        "GLM-4.5-sim",
        "<think>Weather first.</think>Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Oslo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
        "</tool_call>",
        content="Checking.",
        reasoning="Weather first.",
        calls=(WEATHER,),
    ),
    Case(
        "glm47_moe",
        "GLM-4.7-sim",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
        "<tool_call>get_time<arg_key>zone</arg_key><arg_value>CET</arg_value></tool_call>",
        calls=(WEATHER, TIME),
    ),
    Case(
        "step3",
        "step3-sim",
        f"Call the tool.</think>Sure.\n{ST_CALLS_BEGIN}{ST_CALL_BEGIN}function{ST_SEP}"
        '<steptml:invoke name="get_weather"><steptml:parameter name="city">Oslo'
        '</steptml:parameter><steptml:parameter name="days">3</steptml:parameter>'
        f"</steptml:invoke>{ST_CALL_END}{ST_CALLS_END}",
        content="Sure.",
        reasoning="Call the tool.",
        calls=(WEATHER,),
    ),
    Case(
        "minimax_m2",
        "MiniMax-M2-sim",
        'Two lookups.</think>\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Oslo</parameter>\n<parameter name="days">3</parameter>\n'
        '</invoke>\n<invoke name="get_time">\n<parameter name="zone">CET</parameter>\n'
        "</invoke>\n</minimax:tool_call>",
        reasoning="Two lookups.",
        calls=(WEATHER, TIME),
    ),
    Case(
        "cohere+cohere_cmd",
        "command-r-sim",
        "<|START_THINKING|>They want the weather.<|END_THINKING|>"
        "<|START_RESPONSE|>Let me check.<|END_RESPONSE|>\n<|START_ACTION|>"
        f'[{{"tool_name": "get_weather", "parameters": {W_JSON}}}]<|END_ACTION|>',
        content="Let me check.",
        reasoning="They want the weather.",
        calls=(WEATHER,),
    ),
]

REASONING_CASES = [
    Case(
        "qwen3",
        "Qwen3-8B-sim",
        "<think>\n2 + 2 is 4.\n</think>\n\nThe answer is 4.",
        content="The answer is 4.",
        reasoning="2 + 2 is 4.",
        tools=False,
    ),
    Case(
        "deepseek_r1",
        "DeepSeek-R1-sim",
        "Add them up.\n</think>\n\nFour.",
        content="Four.",
        reasoning="Add them up.",
        tools=False,
    ),
    Case(
        "kimi",
        "Kimi-K2-sim",
        "\u25c1think\u25b7Simple sum.\u25c1/think\u25b7It is 4.",
        content="It is 4.",
        reasoning="Simple sum.",
        tools=False,
    ),
    Case(
        "cohere_cmd",
        "command-r-sim",
        "<|START_THINKING|>Sum them.<|END_THINKING|>It is 4.",
        content="It is 4.",
        reasoning="Sum them.",
        tools=False,
    ),
]

TWO_QWEN_CALLS = (
    f'<tool_call>\n{{"name": "get_weather", "arguments": {W_JSON}}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
)
MALFORMED_QWEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'

SPECIAL_CASES = [
    # tool_choice "none": no tool parsing, the raw text is the content
    Case(
        "tool_choice_none",
        "Qwen3-8B-sim",
        TWO_QWEN_CALLS,
        content=TWO_QWEN_CALLS,
        extra={"tool_choice": "none"},
    ),
    # parallel_tool_calls false: only the first call is kept
    Case(
        "parallel_tool_calls_false",
        "Qwen3-8B-sim",
        "Both.\n" + TWO_QWEN_CALLS,
        content="Both.",
        calls=(WEATHER,),
        extra={"parallel_tool_calls": False},
    ),
    # separate_reasoning false: the think block stays inline in the content
    Case(
        "separate_reasoning_false",
        "Qwen3-8B-sim",
        "<think>hmm</think>Four.",
        content="<think>hmm</think>Four.",
        tools=False,
        extra_body={"separate_reasoning": False},
    ),
    # `</tool_call>` as a stop string: the block is left open, its complete body still counts
    Case(
        "stop_string_closes_call",
        "Qwen3-8B-sim",
        TWO_QWEN_CALLS,
        calls=(WEATHER,),
        extra={"stop": ["</tool_call>"]},
    ),
    # tool_choice "required": the engine is constrained to a JSON array of calls
    Case(
        "tool_choice_required",
        "Qwen3-8B-sim",
        '[{"name": "get_time", "parameters": {"zone": "CET"}}]',
        calls=(TIME,),
        extra={"tool_choice": "required"},
    ),
    # tool_choice naming a function: the whole output is that function's arguments
    Case(
        "tool_choice_named",
        "Qwen3-8B-sim",
        W_JSON,
        calls=(WEATHER,),
        extra={"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    ),
    # a malformed call is returned as content, verbatim, and the answer just stops
    Case("malformed_call", "Qwen3-8B-sim", MALFORMED_QWEN, content=MALFORMED_QWEN),
    # a call to a function that is not in `tools` still comes back as a call
    Case(
        "unknown_function",
        "Qwen3-8B-sim",
        '<tool_call>\n{"name": "book_flight", "arguments": {"to": "Rome"}}\n</tool_call>',
        calls=(("book_flight", {"to": "Rome"}),),
    ),
]


# --- fixtures ------------------------------------------------------------------------------------


@dataclass
class Fleet:
    gw: Gateway
    engines: dict[str, Engine]
    client: openai.OpenAI


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    started = [module_launch.start_engine(m, "vllm", chunk_tokens=1) for m in MODELS]

    def all_serving() -> bool:  # one deadline for the lot: they share 2 cores while starting
        for e in started:
            if not e.proc.alive:
                raise ProcessDied(e.proc)
        for e in started:
            e.stats()
        return True

    try:
        wait_until(all_serving, ENGINES_DEADLINE_S, f"{len(started)} engines to serve", 0.2)
    except ProcessDied:
        pass  # wait_engine below restarts one that lost its port, or fails with its log
    engines = [module_launch.wait_engine(e, chunk_tokens=1) for e in started]
    gw = module_launch.gateway(engines, tokenizer_path=qwen3_tokenizer_dir())
    with gw.client(timeout_s=20.0) as client:
        yield Fleet(gw, {e.model: e for e in engines}, client)


# --- helpers -------------------------------------------------------------------------------------


def request(case: Case) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": case.model,
        "messages": [{"role": "user", "content": f"SIM_REPLY: {case.reply}"}],
        "temperature": 0,
        **case.extra,
    }
    if case.tools:
        body["tools"] = TOOLS
    if case.extra_body:
        body["extra_body"] = case.extra_body
    return body


@dataclass
class Answer:
    """One choice, from a message or from aggregated stream deltas."""

    content: str | None
    reasoning: str | None
    calls: list[tuple[str, str, str]]  # (id, name, arguments)
    finish: str | None


def from_message(resp: Any) -> Answer:
    assert len(resp.choices) == 1, resp
    choice = resp.choices[0]
    msg = choice.message
    assert msg.role == "assistant"
    calls = []
    for tc in msg.tool_calls or []:
        assert tc.type == "function", tc
        calls.append((tc.id, tc.function.name, tc.function.arguments))
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    return Answer(msg.content, reasoning, calls, choice.finish_reason)


def from_stream(chunks: list[Any], markers: tuple[str, ...]) -> Answer:
    """Aggregate deltas as a client does; check each delta's shape on the way."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[str]] = {}
    finishes = []
    for chunk in chunks:
        for choice in chunk.choices:
            assert choice.index == 0, chunk
            if choice.finish_reason is not None:
                finishes.append(choice.finish_reason)
            delta = choice.delta
            if delta is None:
                continue
            extra = delta.model_extra or {}
            for kind, text in (
                ("content", delta.content),
                ("reasoning", extra.get("reasoning_content")),
            ):
                if text:
                    leaked = [m for m in markers if m in text]
                    assert not leaked, f"{kind} delta {text!r} carries marker text {leaked}"
                    (content if kind == "content" else reasoning).append(text)
            for tc in delta.tool_calls or []:
                fn = tc.function
                if tc.index not in calls:
                    # the first delta of a call names it and gives its id
                    assert tc.id and fn is not None and fn.name, f"first delta of a call: {tc}"
                    assert tc.type == "function", tc
                    calls[tc.index] = [tc.id, fn.name, fn.arguments or ""]
                else:
                    assert tc.id is None and (fn is None or fn.name is None), f"later delta: {tc}"
                    calls[tc.index][2] += (fn.arguments or "") if fn is not None else ""
    assert len(finishes) == 1, finishes
    assert sorted(calls) == list(range(len(calls))), f"call indexes {sorted(calls)}"
    return Answer(
        "".join(content) or None,
        "".join(reasoning) or None,
        [tuple(calls[i]) for i in sorted(calls)],  # type: ignore[misc]
        finishes[0],
    )


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def check(answer: Answer, case: Case) -> None:
    assert answer.finish == case.finish, answer
    assert (answer.content or "") == case.content, answer
    assert (answer.reasoning or "") == case.reasoning, answer
    # compared as canonical JSON so that 3 vs 3.0 vs "3" (or true vs 1) all differ
    got = [(name, canonical(json.loads(args))) for _, name, args in answer.calls]
    assert got == [(name, canonical(args)) for name, args in case.calls], answer
    ids = [cid for cid, _, _ in answer.calls]
    assert all(ids) and len(set(ids)) == len(ids), ids


def run_both(fleet: Fleet, case: Case, markers: tuple[str, ...] = MARKERS) -> None:
    """The case non-streamed and streamed: each as expected, and the stream equal to the whole."""
    body = request(case)
    whole = fleet.client.chat.completions.create(**body)
    assert whole.model == case.model
    message = from_message(whole)
    check(message, case)
    if case.calls and not case.content:
        assert whole.choices[0].message.content is None, whole  # OpenAI's shape for calls only
    streamed = from_stream(list(fleet.client.chat.completions.create(**body, stream=True)), markers)
    check(streamed, case)
    same = (message.content or None, message.reasoning, message.finish)
    assert (streamed.content, streamed.reasoning, streamed.finish) == same
    assert [c[1:] for c in streamed.calls] == [c[1:] for c in message.calls]


# --- tests ---------------------------------------------------------------------------------------


def test_model_names_detect_the_intended_families() -> None:
    for model, (tool, reasoning) in MODELS.items():
        assert (detect_tool_parser(model), detect_reasoning_parser(model)) == (tool, reasoning), (
            model
        )


@pytest.mark.parametrize("case", TOOL_CASES, ids=lambda c: c.id)
def test_tool_call_family(fleet: Fleet, case: Case) -> None:
    run_both(fleet, case)


@pytest.mark.parametrize("case", REASONING_CASES, ids=lambda c: c.id)
def test_reasoning_family(fleet: Fleet, case: Case) -> None:
    run_both(fleet, case)


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=lambda c: c.id)
def test_request_options_and_fallbacks(fleet: Fleet, case: Case) -> None:
    # these cases expect raw marker text in the content on purpose
    run_both(fleet, case, markers=() if case.content.startswith("<") else MARKERS)


def test_parse_function_call_endpoint(fleet: Fleet) -> None:
    text = f'Sure.\n<tool_call>\n{{"name": "get_weather", "arguments": {W_JSON}}}\n</tool_call>'
    r = fleet.gw.request(
        "POST", "/parse/function_call", {"text": text, "tool_call_parser": "qwen", "tools": TOOLS}
    )
    assert r.status == 200, r
    out = r.json()
    assert out["success"] is True and out["remaining_text"] == "Sure.", out
    [call] = out["tool_calls"]
    assert call["type"] == "function" and call["id"], call
    assert call["function"]["name"] == "get_weather", call
    assert json.loads(call["function"]["arguments"]) == WEATHER[1]

    bad = fleet.gw.request(
        "POST", "/parse/function_call", {"text": text, "tool_call_parser": "no-such-format"}
    )
    assert_openai_error(bad, 400, "invalid_value", param="tool_call_parser")


def test_parse_reasoning_endpoint(fleet: Fleet) -> None:
    text = "Add them.</think>\n\nFour."
    r = fleet.gw.request(
        "POST", "/parse/reasoning", {"text": text, "reasoning_parser": "deepseek_r1"}
    )
    assert r.status == 200, r
    assert r.json() == {"normal_text": "Four.", "reasoning_text": "Add them.", "success": True}

    bad = fleet.gw.request("POST", "/parse/reasoning", {"text": text, "reasoning_parser": "nope"})
    assert_openai_error(bad, 400, "invalid_value", param="reasoning_parser")
