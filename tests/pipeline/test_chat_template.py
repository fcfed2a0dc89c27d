"""ChatTemplate: HF rendering semantics, on the real Qwen3 template and on small custom ones."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.chat_template import (
    ChatTemplate,
    TemplateError,
    hf_tojson,
    normalise_messages,
    special_token_variables,
    template_wants_object_arguments,
)
from smg.sim.tokenizer_files import qwen3_tokenizer_dir


@pytest.fixture(scope="module")
def qwen3() -> ChatTemplate:
    return ChatTemplate.from_tokenizer_dir(qwen3_tokenizer_dir())


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo actuelle",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def call(name: str, args: str, cid: str = "c1") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def test_qwen3_basic(qwen3: ChatTemplate) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert qwen3.render(msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert qwen3.render(msgs, add_generation_prompt=False).endswith("Hi<|im_end|>\n")


def test_qwen3_enable_thinking_false_inserts_empty_think(qwen3: ChatTemplate) -> None:
    msgs = [{"role": "user", "content": "Hi"}]
    off = qwen3.render(msgs, chat_template_kwargs={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen3.render(msgs, chat_template_kwargs={"enable_thinking": True}) == qwen3.render(msgs)


def test_qwen3_tools_and_tool_calls(qwen3: ChatTemplate) -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("get_weather", '{"city": "Paris"}'),
                call("get_weather", '{"city":"Rome"}', "c2"),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "25C"},
    ]
    original = copy.deepcopy(msgs)
    out = qwen3.render(msgs, tools=[WEATHER_TOOL])
    assert msgs == original  # the caller's objects are untouched
    assert out.startswith("<|im_start|>system\nSys.\n\n# Tools\n")
    # tojson as HF: non-ASCII kept, key order kept, default separators
    assert "<tools>\n" + json.dumps(WEATHER_TOOL, ensure_ascii=False) + "\n</tools>" in out
    # Qwen3 prints string arguments verbatim (it tests `arguments is string`)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city":"Rome"}}\n</tool_call><|im_end|>\n'
    ) in out
    # consecutive tool results share one user turn
    assert out.endswith(
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n25C\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen3_history_think_is_stripped(qwen3: ChatTemplate) -> None:
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nmull\n</think>\n\nA."},
        {"role": "user", "content": "b"},
    ]
    assert "<|im_start|>assistant\nA.<|im_end|>" in qwen3.render(msgs)


def test_content_parts_joined(qwen3: ChatTemplate) -> None:
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]
    out = qwen3.render([{"role": "user", "content": parts}])
    assert "<|im_start|>user\nHello there<|im_end|>" in out
    with pytest.raises(TemplateError, match="only text parts"):
        qwen3.render([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_qwen3_special_tokens_and_errors(qwen3: ChatTemplate) -> None:
    with pytest.raises(TemplateError):
        qwen3.render([])  # the template indexes messages[0]
    with pytest.raises(TemplateError, match="must be an object"):
        qwen3.render(["hi"])  # type: ignore[list-item]
    with pytest.raises(TemplateError, match="may not set"):
        qwen3.render([{"role": "user", "content": "x"}], chat_template_kwargs={"messages": []})


def test_raise_exception_becomes_template_error() -> None:
    src = (
        "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
        "{% endif %}{{ m.content }}{% endfor %}"
    )
    t = ChatTemplate(src)
    assert t.render([{"role": "user", "content": "a"}]) == "a"
    with pytest.raises(TemplateError, match="roles must alternate") as err:
        t.render([{"role": "assistant", "content": "a"}])
    assert isinstance(err.value, ValueError)


def test_hf_environment_details() -> None:
    src = (
        "{{ data | tojson }}§{{ data | tojson(indent=2) }}§{{ bos_token is defined }}§"
        "{{ eos_token }}§{{ strftime_now('%d %b %Y') }}§{{ flag }}§"
        "{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"
    )
    now = datetime(2025, 3, 7, 12, 0)
    t = ChatTemplate(src, special_tokens={"eos_token": "</s>"}, now=lambda: now)
    data = {"z": "<b>é</b>", "a": [1, 2]}
    compact, pretty, bos, eos, date, flag, loop = t.render([], data=data, flag=True).split("§")
    assert compact == '{"z": "<b>é</b>", "a": [1, 2]}'  # no HTML escaping, key order kept
    assert pretty == json.dumps(data, ensure_ascii=False, indent=2) == hf_tojson(data, indent=2)
    assert (bos, eos, date, flag) == ("False", "</s>", "07 Mar 2025", "True")
    assert loop == "02"  # loopcontrols


def test_trim_and_lstrip_blocks() -> None:
    src = (
        "{% for m in messages %}\n    {% if m.content %}\n[{{ m.content }}]\n"
        "    {% endif %}\n{% endfor %}"
    )
    t = ChatTemplate(src)
    assert t.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == (
        "[a]\n[b]\n"
    )


def test_sandbox_is_immutable() -> None:
    t = ChatTemplate("{{ messages.append(1) }}")
    with pytest.raises(TemplateError):
        t.render([{"role": "user", "content": "x"}])
    with pytest.raises(TemplateError):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])


def test_generation_block_compiles() -> None:
    t = ChatTemplate("{% generation %}{{ messages[0].content }}{% endgeneration %}!")
    assert t.render([{"role": "assistant", "content": "x"}]) == "x!"


def test_compile_errors_and_empty() -> None:
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
    with pytest.raises(TemplateError, match="empty"):
        ChatTemplate("   ")


OBJECT_ARGS = (
    "{% for m in messages %}{% for c in m.tool_calls or [] %}"
    "{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}={{ v }}"
    "{% endfor %}){% endfor %}{% endfor %}"
)


def test_arguments_parsed_when_template_iterates_them() -> None:
    assert template_wants_object_arguments(OBJECT_ARGS)
    assert template_wants_object_arguments("{{ tool_call.arguments | tojson }}")
    assert not template_wants_object_arguments(
        "{% if c.arguments is string %}{{ c.arguments }}{% else %}{{ c.arguments | tojson }}"
        "{% endif %}"
    )
    assert not template_wants_object_arguments("{{ c.function.arguments }}")
    t = ChatTemplate(OBJECT_ARGS)
    msg = {"role": "assistant", "content": "", "tool_calls": [call("f", '{"a": 1, "b": "x"}')]}
    assert t.render([msg]) == "f(a=1b=x)"
    assert ChatTemplate(OBJECT_ARGS).render([{**msg, "tool_calls": [call("g", "")]}]) == "g()"
    with pytest.raises(TemplateError, match="not valid JSON"):
        t.render([{**msg, "tool_calls": [call("f", "{nope")]}])


def test_named_templates_pick_tool_use() -> None:
    t = ChatTemplate({"default": "plain", "tool_use": "tools:{{ tools | length }}"})
    assert t.render([]) == "plain"
    assert t.render([], tools=[WEATHER_TOOL]) == "tools:1"


def test_from_dir_override_and_named_list(tmp_path: Path) -> None:
    config = {
        "eos_token": {"content": "<eos>"},
        "bos_token": "<bos>",
        "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ eos_token }}"}],
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert ChatTemplate.from_tokenizer_dir(tmp_path).render([]) == "<bos><eos>"
    override = tmp_path / "custom.jinja"
    override.write_text("custom {{ messages | length }}")
    assert ChatTemplate.from_tokenizer_dir(tmp_path, override).render([{"role": "u"}]) == (
        "custom 1"
    )
    override.write_text("")
    with pytest.raises(TemplateError, match="empty"):
        ChatTemplate.from_tokenizer_dir(tmp_path, override)
    (tmp_path / "chat_template.jinja").write_text("from jinja file")
    assert ChatTemplate.from_tokenizer_dir(tmp_path).render([]) == "from jinja file"


_TEXT = st.text(max_size=12)
_CONTENT = st.one_of(
    st.none(),
    _TEXT,
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}), max_size=3),
    st.just([{"type": "image_url"}]),  # refused
    st.integers(),  # refused
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"])},
    optional={"content": _CONTENT, "name": _TEXT},
)
_MESSAGES = st.lists(st.one_of(_MESSAGE, st.just({"content": "no role"})), max_size=4)


def _render_or_error(template: ChatTemplate, messages: Any) -> str:
    try:
        return template.render(messages)
    except TemplateError as exc:
        return f"error: {exc}"


@settings(max_examples=examples(150), deadline=None)
@given(messages=_MESSAGES)
def test_plain_lists_of_dicts_render_as_any_sequence_of_mappings(
    qwen3: ChatTemplate, messages: list[dict[str, Any]]
) -> None:
    """A parsed body's list of dicts takes `normalise_messages`' fast checks; a tuple of
    read-only mappings the general ones: the same prompt, or the same error, either way."""
    generic = tuple(MappingProxyType(m) for m in messages)
    assert _render_or_error(qwen3, messages) == _render_or_error(qwen3, generic)


@settings(max_examples=examples(100), deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=4), prompt=st.booleans())
def test_render_is_jinja2s_own_render(
    qwen3: ChatTemplate, messages: list[dict[str, Any]], prompt: bool
) -> None:
    """`render` builds jinja2's context itself (globals merged once, their keys from a plain
    dict): the text is what jinja2's `Template.render` gives for the same variables."""
    try:
        ours = qwen3.render(messages, add_generation_prompt=prompt)
    except TemplateError:
        return  # refused before jinja2 is asked (the generic test covers errors)
    config = json.loads((qwen3_tokenizer_dir() / "tokenizer_config.json").read_text())
    template = qwen3._templates["default"]
    theirs = template.render(
        **special_token_variables(config),
        messages=normalise_messages(messages, object_arguments=False),
        tools=None,
        add_generation_prompt=prompt,
    )
    assert ours == theirs
