"""`${VAR}` and `${VAR:-default}` in config values: the MCP servers file's tokens, headers,
URLs and envs can come from the environment (the Rust gateway's examples write
`token: "${BRAVE_API_KEY}"`; its source, read 2026-11-27, has no expansion code, so the rules
below are smg's, shell-like). Pure: the environment is an argument.

- `${NAME}`: the variable's value; unset is an error naming the variable (never a value).
- `${NAME:-default}`: the value, or `default` when the variable is unset or empty.
- `$${` is a literal `${`; any other `$` stays as it is (a token with `$` or `$$` in it is
  not changed).
- The expansion is not recursive: a value holding `${...}` is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from smg.config.knobs import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_env(text: str, environ: Mapping[str, str], where: str) -> str:
    """`text` with its `${...}` references replaced; raises ConfigError naming `where` and the
    variable for an unset one without a default or a malformed reference."""
    if "$" not in text:
        return text
    out: list[str] = []
    i = 0
    while True:
        j = text.find("$", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        nxt = text[j + 1 : j + 2]
        if text.startswith("$${", j):  # a literal `${`
            out.append("${")
            i = j + 3
            continue
        if nxt != "{":
            out.append("$")
            i = j + 1
            continue
        end = text.find("}", j + 2)
        if end < 0:
            raise ConfigError(f"{where}: unclosed '${{' (expected ${{NAME}} or ${{NAME:-default}})")
        name, sep, default = text[j + 2 : end].partition(":-")
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: '${{{_shown(name)}}}' is not a variable reference "
                "(expected ${NAME} or ${NAME:-default})"
            )
        value = environ.get(name)
        if value is None or (sep and not value):
            if not sep:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            value = default
        out.append(value)
        i = end + 1


def expand_tree(value: Any, environ: Mapping[str, str], prefix: str = "") -> Any:
    """`value` (parsed YAML: mappings, lists, scalars) with every string value expanded; mapping
    keys are left as they are. Errors name the value's path (`{prefix}servers[0].token`)."""
    return _tree(value, environ, prefix, "")


def _tree(value: Any, environ: Mapping[str, str], prefix: str, path: str) -> Any:
    if isinstance(value, str):
        return expand_env(value, environ, f"{prefix}{path or 'value'}")
    if isinstance(value, dict):
        return {
            k: _tree(v, environ, prefix, f"{path}.{k}" if path else str(k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_tree(v, environ, prefix, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _shown(name: str) -> str:
    """A malformed reference's inside, shortened: it is the file's text, not a variable's value,
    but it need not fill the line."""
    return name if len(name) <= 40 else name[:40] + "..."
