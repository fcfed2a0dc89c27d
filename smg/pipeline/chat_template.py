"""Chat template rendering with Hugging Face semantics: messages in, one prompt string out.

The template is compiled once, in a jinja2 `ImmutableSandboxedEnvironment` set up the way
`transformers` sets it up: `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension, a
pass-through `{% generation %}` block, the `raise_exception` and `strftime_now` globals, and
`tojson` as HF defines it (no HTML escaping, `ensure_ascii=False`, key order kept, `indent`
supported). The tokenizer's special tokens (`bos_token`, `eos_token`, ...) are template
variables, and `chat_template_kwargs` (e.g. Qwen3's `enable_thinking`) are passed through.

Messages are normalised before rendering, without touching the caller's objects:
- `content` given as a list of `{"type": "text", "text": ...}` parts is joined with single
  spaces (what the Rust gateway does for string-content templates); other part types are
  refused; `None` content becomes "".
- assistant `tool_calls` keep the OpenAI shape. Their `function.arguments` is a JSON string on
  the wire; templates that consume it as an object (iterate it, or `tojson` it without an
  `is string` branch) get it parsed into a dict. Qwen3's template tests `arguments is string`
  and prints strings verbatim, so for Qwen3 the client's string is kept as is.

Every failure while rendering, including `raise_exception` from the template itself (e.g. a bad
role order), is raised as `TemplateError` (a `ValueError`), which the API layer maps to 400.
Only `from_tokenizer_dir` reads files; `render` is pure apart from `strftime_now`, whose clock
can be injected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

Message = Mapping[str, Any]

# Variables `render` sets itself; chat_template_kwargs may not override them.
RESERVED_VARIABLES = frozenset({"messages", "tools", "add_generation_prompt"})
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")

# A template consumes `arguments` as an object if it iterates it or serialises it ...
_ARGS_AS_OBJECT = re.compile(
    r"arguments\s*\|\s*(?:items|dictsort|tojson)\b"
    r"|arguments\s*\.\s*items\s*\("
    r"|\bin\s+[\w.\[\]'\"]*arguments\b"
)
# ... unless it also branches on the value's type, i.e. handles a JSON string itself.
_ARGS_TYPE_TEST = re.compile(r"arguments\s+is\s+(?:not\s+)?(?:string|mapping)\b")


class TemplateError(ValueError):
    """The chat template could not render these messages (the client's request is at fault)."""


def hf_tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """The `tojson` filter exactly as Hugging Face defines it for chat templates."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in HF;
    for rendering it is a no-op wrapper, but templates using it must still compile."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        body: list[nodes.Node] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return body


def template_wants_object_arguments(source: str) -> bool:
    """True when the template needs tool-call `arguments` as a dict rather than a JSON string."""
    return bool(_ARGS_AS_OBJECT.search(source)) and not _ARGS_TYPE_TEST.search(source)


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config: a string, or an AddedToken dict with `content`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_token_variables(config: Mapping[str, Any]) -> dict[str, Any]:
    """bos/eos/unk/pad tokens (those that are set) as template variables, like HF's map."""
    out: dict[str, Any] = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = _token_text(config.get(key))
        if text is not None:
            out[key] = text
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [t for t in map(_token_text, extra) if t is not None]
    return out


def _join_text_parts(parts: Sequence[Any], index: int) -> str:
    texts: list[str] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise TemplateError(
                f"messages[{index}].content: only text parts are supported, got {kind!r}"
            )
        texts.append(part["text"])
    return " ".join(texts)


def _normalise_tool_calls(calls: Any, index: int, as_object: bool) -> list[Any]:
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        raise TemplateError(f"messages[{index}].tool_calls must be a list")
    out: list[Any] = []
    for n, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        args = fn.get("arguments") if isinstance(fn, Mapping) else None
        if not as_object or not isinstance(args, str):
            out.append(call)
            continue
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise TemplateError(
                f"messages[{index}].tool_calls[{n}].function.arguments is not valid JSON: {exc}"
            ) from None
        out.append({**call, "function": {**fn, "arguments": parsed}})  # type: ignore[dict-item]
    return out


def normalise_messages(messages: Sequence[Message], *, object_arguments: bool) -> list[Message]:
    """Copies of `messages` in the shape HF templates expect (see the module docstring)."""
    # `type(...) is` first: a parsed JSON body's own list and dicts skip the ABC checks
    if type(messages) is not list and (
        isinstance(messages, str | bytes) or not isinstance(messages, Sequence)
    ):
        raise TemplateError("messages must be a list")
    out: list[Message] = []
    for i, message in enumerate(messages):
        if (type(message) is not dict and not isinstance(message, Mapping)) or not isinstance(
            message.get("role"), str
        ):
            raise TemplateError(f"messages[{i}] must be an object with a string 'role'")
        msg = dict(message)
        content = msg.get("content")
        if isinstance(content, str):
            pass
        elif content is None:
            msg["content"] = ""
        elif isinstance(content, list | tuple):
            msg["content"] = _join_text_parts(content, i)
        else:
            raise TemplateError(f"messages[{i}].content must be a string or a list of parts")
        if msg.get("tool_calls"):
            msg["tool_calls"] = _normalise_tool_calls(msg["tool_calls"], i, object_arguments)
        out.append(msg)
    return out


def _make_environment(now: Callable[[], datetime]) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = hf_tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: now().strftime(fmt)
    return env


def _select_source(raw: Any) -> dict[str, str]:
    """tokenizer_config's `chat_template`: one string, or a list of {name, template} (HF)."""
    if isinstance(raw, str):
        return {"default": raw}
    if isinstance(raw, list):
        named = {
            str(t["name"]): str(t["template"])
            for t in raw
            if isinstance(t, Mapping) and "name" in t and "template" in t
        }
        if named:
            return named
    raise TemplateError("tokenizer_config.json has no usable chat_template")


class ChatTemplate:
    """A compiled chat template (or a named set of them) plus the tokenizer's special tokens."""

    __slots__ = ("_context_globals", "_globals", "_object_args", "_sources", "_templates")

    def __init__(
        self,
        source: str | Mapping[str, str],
        *,
        special_tokens: Mapping[str, Any] | None = None,
        now: Callable[[], datetime] = datetime.now,
    ) -> None:
        sources = {"default": source} if isinstance(source, str) else dict(source)
        if not sources or not all(s.strip() for s in sources.values()):
            raise TemplateError("chat template is empty")
        env = _make_environment(now)
        try:
            self._templates = {name: env.from_string(src) for name, src in sources.items()}
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template does not compile: {exc}") from None
        # each template's globals and the special tokens as one plain dict, merged once:
        # jinja2's `render` merges them with the variables from a ChainMap on every call (2 % of
        # a gRPC-mode request, py-spy)
        specials = dict(special_tokens or {})
        self._globals = {name: {**t.globals, **specials} for name, t in self._templates.items()}
        # what a render's context is given as the template's globals: jinja2 takes only their
        # keys (`set(globals)`), which from the template's own ChainMap goes through
        # ChainMap.__iter__ in Python (~2 us a render); a plain dict of the same keys, once
        self._context_globals = {name: dict(t.globals) for name, t in self._templates.items()}
        self._sources = sources
        self._object_args = {n: template_wants_object_arguments(s) for n, s in sources.items()}

    @classmethod
    def from_tokenizer_dir(
        cls,
        path: str | Path,
        override: str | Path | None = None,
        *,
        now: Callable[[], datetime] = datetime.now,
    ) -> ChatTemplate:
        """Load from a tokenizer folder; `override` is a `--chat-template` file path."""
        folder = Path(path)
        config_path = folder / "tokenizer_config.json"
        config: dict[str, Any] = {}
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        source: str | dict[str, str]
        jinja_file = folder / "chat_template.jinja"
        if override is not None:
            source = Path(override).read_text(encoding="utf-8")
            if not source.strip():
                raise TemplateError(f"chat template file {override} is empty")
        elif jinja_file.is_file():
            source = jinja_file.read_text(encoding="utf-8")
        else:
            source = _select_source(config.get("chat_template"))
        return cls(source, special_tokens=special_token_variables(config), now=now)

    @property
    def source(self) -> str:
        """The default template's source text."""
        return self._sources.get("default") or next(iter(self._sources.values()))

    def _pick(self, tools: Any) -> str:
        if tools and "tool_use" in self._templates:
            return "tool_use"
        return "default" if "default" in self._templates else next(iter(self._templates))

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for `messages` (raises TemplateError on any rendering failure).

        `chat_template_kwargs` is the client's dict (reserved names are refused); keyword
        arguments are trusted extra variables from the gateway itself.
        """
        name = self._pick(tools)
        variables = self._globals[name].copy()
        if chat_template_kwargs:
            clash = RESERVED_VARIABLES.intersection(chat_template_kwargs)
            if clash:
                raise TemplateError(f"chat_template_kwargs may not set {sorted(clash)}")
            variables.update(chat_template_kwargs)
        if template_kwargs:
            variables.update(template_kwargs)
        msgs = normalise_messages(messages, object_arguments=self._object_args[name])
        variables.update(
            messages=msgs,
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
        )
        template = self._templates[name]
        try:
            # `render` without its ChainMap merge: the globals are in `variables` already; the
            # context as `new_context(variables, shared=True)` makes it (two calls fewer), its
            # globals' keys from a plain dict
            env = template.environment
            context = env.context_class(
                env, variables, template.name, template.blocks, globals=self._context_globals[name]
            )
            text: str = env.concat(template.root_render_func(context))
            return text
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template error: {exc.message or exc}") from None
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
            raise TemplateError(f"chat template error: {type(exc).__name__}: {exc}") from None
