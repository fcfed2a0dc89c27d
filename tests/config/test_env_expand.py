"""`${VAR}` / `${VAR:-default}` in config values (smg/config/env_expand.py), and in the MCP
servers file: expanded from the given environment, an unset variable is one ConfigError line
naming it (never a value)."""

from __future__ import annotations

import pytest

from smg.config.env_expand import expand_env, expand_tree
from smg.config.knobs import ConfigError
from smg.config.mcp import load_mcp_config, parse_mcp_config

ENV = {"TOKEN": "tok-SECRET", "HOST": "mcp.example.com", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("plain", "plain"),
        ("${TOKEN}", "tok-SECRET"),
        ("https://${HOST}:8443/mcp", "https://mcp.example.com:8443/mcp"),
        ("${HOST}/${HOST}", "mcp.example.com/mcp.example.com"),
        ("${MISSING:-fallback}", "fallback"),
        ("${MISSING:-}", ""),
        ("${EMPTY:-fallback}", "fallback"),  # as the shell: empty takes the default
        ("${EMPTY}", ""),
        ("${TOKEN:-unused}", "tok-SECRET"),
        ("${MISSING:-a:-b}", "a:-b"),
        ("cost: $5 and $$HOME", "cost: $5 and $$HOME"),  # tokens may hold `$`: unchanged
        ("$${HOME} and $${X:-y}", "${HOME} and ${X:-y}"),  # `$${` is a literal `${`
        ("$", "$"),
        ("${HOST}$", "mcp.example.com$"),
    ],
)
def test_expansion(text: str, expanded: str) -> None:
    assert expand_env(text, ENV, "x") == expanded


def test_the_expansion_is_not_recursive() -> None:
    assert expand_env("${A}", {"A": "${B}", "B": "no"}, "x") == "${B}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Bearer ${NOPE}", "servers[0].token: environment variable NOPE is not set"),
        ("${TOKEN", "servers[0].token: unclosed '${'"),
        ("${}", "'${}' is not a variable reference"),
        ("${1X}", "'${1X}' is not a variable reference"),
        ("${A B}", "'${A B}' is not a variable reference"),
    ],
)
def test_bad_references_are_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_env(text, ENV, "servers[0].token")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "tok-SECRET" not in str(info.value)


def test_a_tree_expands_values_not_keys_and_names_the_path() -> None:
    tree = {"${HOST}": ["${TOKEN}", 3, True, None, {"k": "${HOST}"}]}
    assert expand_tree(tree, ENV) == {
        "${HOST}": ["tok-SECRET", 3, True, None, {"k": "mcp.example.com"}]
    }
    with pytest.raises(ConfigError, match=r"^cfg: a\[1\]\.b: environment variable X is not set$"):
        expand_tree({"a": [1, {"b": "${X}"}]}, {}, "cfg: ")


FILE = """
servers:
  - name: search
    protocol: streamable
    url: "https://${HOST}/mcp"
    token: "${TOKEN}"
    headers: {X-Tenant: "${TENANT:-default-tenant}"}
  - name: files
    protocol: stdio
    command: "${PYTHON:-python3}"
    args: ["-m", "${MODULE}"]
    envs: {API_KEY: "${TOKEN}"}
"""


def test_the_mcp_file_expands_tokens_headers_urls_commands_and_envs() -> None:
    env = {**ENV, "MODULE": "my_server"}
    search, files = parse_mcp_config(FILE, env).servers
    assert search.url == "https://mcp.example.com/mcp" and search.token == "tok-SECRET"
    assert search.headers == (("X-Tenant", "default-tenant"),)
    assert (files.command, files.args, files.envs) == (
        "python3",
        ("-m", "my_server"),
        (("API_KEY", "tok-SECRET"),),
    )


def test_an_unset_variable_in_the_mcp_file_names_it_and_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_mcp_config(FILE, ENV)  # MODULE is not set
    text = str(info.value)
    assert text == "mcp config: servers[1].args[1]: environment variable MODULE is not set"


def test_a_url_from_a_variable_is_still_checked_as_a_url() -> None:
    text = "servers: [{name: a, protocol: sse, url: '${URL}'}]"
    with pytest.raises(ConfigError, match="url must be http:// or https://"):
        parse_mcp_config(text, {"URL": "ftp://h"})


def test_load_reads_the_process_environment_by_default(tmp_path, monkeypatch) -> None:
    path = tmp_path / "mcp.yaml"
    path.write_text("servers: [{name: a, protocol: sse, url: 'http://h/sse', token: '${T}'}]")
    monkeypatch.setenv("T", "from-env")
    assert load_mcp_config(str(path)).servers[0].token == "from-env"
    assert load_mcp_config(str(path), {"T": "given"}).servers[0].token == "given"
    monkeypatch.delenv("T")
    with pytest.raises(ConfigError, match="environment variable T is not set"):
        load_mcp_config(str(path))
