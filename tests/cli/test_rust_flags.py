"""The Rust gateway's `smg launch` 1.13 command line, flag by flag (issue 13).

tests/cli/rust_launch_help.txt is `smg launch --help` of the Rust gateway (`pip install
smg==1.13.0`), saved as the yardstick: every long flag in it (aliases included) either parses
into the config tree, or parses and then exits 2 with `smg launch: error: --flag is not supported
yet` -- never argparse's "unrecognized arguments", never silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from smg.cli import gateway_config_from, parse
from smg.config.not_yet import NOT_YET, NOT_YET_VALUES

# served / not yet of the 212 flags: the one place to change as flags get served
SERVED_COUNT, NOT_YET_COUNT = 124, 88
HELP = Path(__file__).with_name("rust_launch_help.txt").read_text()


def rust_options() -> list[tuple[list[str], str]]:
    """(names, metavar) of each option in the help's option lists, `-h/--help` left out."""
    options = []
    for line in HELP.splitlines():
        if not line.startswith("  --"):
            continue
        head = re.split(r"\s{2,}", line.strip())[0]
        parts = re.split(r", (?=--)", head)  # choice lists hold commas too: {a,b}
        names = [p.split(" ", 1)[0] for p in parts]
        metavar = parts[0].split(" ", 1)[1] if " " in parts[0] else ""
        options.append((names, metavar))
    return options


OPTIONS = rust_options()
RUST_FLAGS = [name for names, _ in OPTIONS for name in names]
NOT_YET_FLAGS = {name: row for row in NOT_YET for name in (row.flag, *row.aliases)}
# switches that select what is already smg's default: served, yet the config does not change
SAME_AS_DEFAULT = {
    "--control-plane-audit-enabled",
    "--no-remove-unhealthy-workers",
    "--no-worker-auto-recovery",
}


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `smg` prints when it refuses `argv` (it must: exit status 2)."""
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def sample_argv(flag: str, metavar: str) -> list[str]:
    if not metavar:
        return [flag]
    if metavar.startswith("{"):
        choices = metavar[1:-1].split(",")
        served = [c for c in choices if c not in NOT_YET_VALUES.get(flag, ())]
        return [flag, served[-1]]  # the last choice: never the default in this help
    return [flag, "1"]  # parses as a str, an int and a float


def test_the_yardstick_is_the_whole_rust_help() -> None:
    assert len(OPTIONS) == 212  # the count issue 13 names
    assert len(RUST_FLAGS) == len(set(RUST_FLAGS)) == 221  # with the aliases
    assert "--enable-igw" in RUST_FLAGS and "--sticky-sessions" in RUST_FLAGS


@pytest.mark.parametrize("flag", RUST_FLAGS)
def test_every_rust_flag_parses(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    metavar = next(m for names, m in OPTIONS if flag in names)
    argv = ["launch", *sample_argv(flag, metavar)]
    if flag in NOT_YET_FLAGS:
        assert refusal(argv, capsys) == f"smg launch: error: {flag} is not supported yet\n"
        return
    _, ns = parse(argv)  # served: the value lands in the config tree
    cfg = gateway_config_from(ns)
    if flag not in SAME_AS_DEFAULT:
        assert cfg != gateway_config_from(parse([])[1]), f"{argv} changed nothing"


def test_the_not_yet_table_is_honest() -> None:
    """Every row is a Rust-gateway flag, and none of them is also served (argparse would refuse
    the clash; this also catches a row whose flag smg serves under a knob's alias)."""
    rust = set(RUST_FLAGS)
    assert set(NOT_YET_FLAGS) <= rust
    for flag in NOT_YET_VALUES:
        assert flag in rust
    # the table shrinks as issues land: keep these two in step with it (212 in all)
    served = [names for names, _ in OPTIONS if not NOT_YET_FLAGS.keys() & set(names)]
    assert (len(served), len(NOT_YET)) == (SERVED_COUNT, NOT_YET_COUNT)


def test_a_dstack_style_command_line_names_the_unsupported_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "--dp-minimum-tokens-scheduler",
        "--host", "0.0.0.0", "--port", "8000",
        "--history-backend", "postgres", "--postgres-db-url", "postgresql://u:p@db:5432/smg",
        "--policy", "cache_aware", "--log-level", "info",
    ]  # fmt: skip
    err = refusal(argv, capsys)
    assert err == "smg launch: error: --dp-minimum-tokens-scheduler is not supported yet\n"
    assert "unrecognized" not in err and "postgresql://" not in err


def test_several_unsupported_flags_are_all_named(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--dp-minimum-tokens-scheduler",
        "--port",
        "1",
        "--discovery-file",
        "a",
        "--sticky-sessions",
        "--dp-minimum-tokens-scheduler",
    ]
    assert refusal(argv, capsys) == (
        "smg launch: error: --dp-minimum-tokens-scheduler is not supported yet "
        "(nor --discovery-file, --sticky-sessions)\n"
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--history-backend", "oracle"], "--history-backend oracle"),
        (["--policy", "passthrough"], "--policy passthrough"),
        (["--decode-policy=passthrough"], "--decode-policy passthrough"),
        (["--tool-call-parser", "qwen3"], "--tool-call-parser qwen3"),  # smg's is `qwen`
        (["--reasoning-parser", "kimi_k25"], "--reasoning-parser kimi_k25"),
    ],
)
def test_values_smg_lacks_are_refused_by_name(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(argv, capsys) == f"smg launch: error: {named} is not supported yet\n"


def test_node_refuses_them_too(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(["node", "--upstream-http2"], capsys)
    assert err == "smg node: error: --upstream-http2 is not supported yet\n"


@pytest.mark.parametrize(
    "argv",
    [
        # a switch takes no value: the next flag still parses
        ["--dp-minimum-tokens-scheduler", "--port", "5"],
        # one value, also in the --flag=value form, even when it looks like a negative number
        ["--job-queue-capacity=7", "--port", "5"],
        ["--rl-fanout-concurrency", "-1", "--port", "5"],
        # one or more values, repeatable
        ["--encode-selector", "app=a", "tier=b", "--encode-selector", "c=d", "--port", "5"],
        # zero or more values
        ["--routing-key-headers", "--port", "5"],
        ["--request-id-headers", "x-a", "x-b", "--port", "5"],
        ["--discovery-file", "a", "--discovery-file=c=d", "--port", "5"],
        ["--zmq-engine-count", "2", "--port", "5"],
    ],
)
def test_unsupported_flags_consume_their_values_as_the_rust_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Values are consumed as argparse in the Rust gateway's launcher would: the refusal names
    the flag, not a stray value as an unrecognized argument."""
    assert refusal(argv, capsys).startswith(f"smg launch: error: {argv[0].split('=')[0]} is")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--dp-minimum-tokens-scheduler=yes"],
            "ignored explicit argument 'yes'",
        ),  # a switch takes no value
        (["--oracle-password"], "expected one argument"),
        (["--encode-selector"], "expected at least one argument"),
        (["--job-queue-capacity", "many"], "invalid int value: 'many'"),
        (["--cache-index", "trie"], "invalid choice: 'trie'"),
    ],
)
def test_malformed_unsupported_flags_fail_as_in_the_rust_gateway(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert error in refusal(argv, capsys)


def test_repeatable_flags_add_up_as_in_the_rust_gateway() -> None:
    _, ns = parse(
        [
            "--worker-urls", "http://a:1", "--worker-urls", "http://b:2", "http://c:3",
            "--control-plane-api-keys", "k1:Ops team:admin:s1", "k2:Read only:user:s2",
            "--control-plane-api-keys", "k3:CI:user:s3",
            "--jwt-role-mapping", "G.Admin=admin", "G.User=user",
            "--cors-allowed-origins", "https://a", "--cors-allowed-origins", "https://b",
            "--mesh-peer-urls", "p1:1", "--mesh-peer-urls", "p2:2",
            "--ca-cert-paths", "a.pem", "--ca-cert-paths", "b.pem",
        ]
    )  # fmt: skip
    cfg = gateway_config_from(ns)
    assert cfg.workers.worker_urls == ("http://a:1", "http://b:2", "http://c:3")
    assert cfg.auth.control_plane_api_keys == (
        "k1:Ops team:admin:s1",
        "k2:Read only:user:s2",
        "k3:CI:user:s3",
    )
    assert cfg.auth.jwt_role_mapping == ("G.Admin=admin", "G.User=user")
    assert cfg.auth.cors_allowed_origins == ("https://a", "https://b")
    assert cfg.mesh.mesh_peer_urls == ("p1:1", "p2:2")
    assert cfg.tls.ca_cert_paths == ("a.pem", "b.pem")


def test_pd_workers_take_their_values_as_in_the_rust_gateway(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--prefill URL [BOOTSTRAP_PORT|none]` and `--decode URL`, each repeatable."""
    argv = [
        "--pd-disaggregation",
        "--prefill", "http://p1:8000", "9000", "--prefill", "http://p2:8000",
        "--decode", "http://d1:8001", "--decode", "http://d2:8001",
    ]  # fmt: skip
    pd = gateway_config_from(parse(argv)[1]).pd
    assert pd.prefill == ("http://p1:8000 9000", "http://p2:8000")
    assert pd.decode == ("http://d1:8001", "http://d2:8001")
    err = refusal(["--decode", "http://d1:8001", "http://d2:8001"], capsys)
    assert "unrecognized arguments: http://d2:8001" in err  # one URL per --decode, as there


def test_control_plane_keys_from_the_environment_keep_their_blanks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SMG_CONTROL_PLANE_API_KEYS", "k1:Ops team:admin:s1,k2:CI:user:s2")
    cfg = gateway_config_from(parse([])[1])
    assert cfg.auth.control_plane_api_keys == ("k1:Ops team:admin:s1", "k2:CI:user:s2")
    # an explicit flag replaces the environment's list
    cfg = gateway_config_from(parse(["--control-plane-api-keys", "k9:X:user:s9"])[1])
    assert cfg.auth.control_plane_api_keys == ("k9:X:user:s9",)


def test_rust_names_of_served_knobs() -> None:
    """Flags smg serves under its own name: the Rust gateway's name is an alias (same meaning)."""
    _, ns = parse(
        [
            "--spill-abs-threshold", "7", "--spill-rel-threshold", "2.5",
            "--postgres-pool-max", "3", "--redis-pool-max", "4",
            "--header-read-timeout-secs", "12", "--idle-connection-timeout-secs", "90",
        ]
    )  # fmt: skip
    cfg = gateway_config_from(ns)
    assert cfg.routing.balance_abs_threshold == 7 and cfg.routing.balance_rel_threshold == 2.5
    assert cfg.storage.postgres_pool_max_size == 3 and cfg.storage.redis_pool_max_size == 4
    assert cfg.limits.header_timeout_secs == 12 and cfg.limits.keepalive_timeout_secs == 90
    for flag in ("--postgres-op-timeout-secs", "--redis-op-timeout-secs"):
        assert gateway_config_from(parse([flag, "2"])[1]).storage.history_timeout_secs == 2
    # the Rust gateway's opt-in audit switch: smg audits by default, and it undoes the opt-out
    off = gateway_config_from(parse(["--disable-audit-logging"])[1]).auth
    assert off.disable_audit_logging is True
    on = parse(["--disable-audit-logging", "--control-plane-audit-enabled"])[1]
    assert gateway_config_from(on).auth.disable_audit_logging is False


def test_help_lists_the_unsupported_flags_after_the_served_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(["launch", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    start = out.index("not supported yet (issue ")  # the first issue's section
    assert out.index("--mcp-config-path") < start  # the served flags come first
    assert "not supported yet (issue 13)" not in out  # issue 13 serves all of its flags
    assert "not supported yet (issue 14)" in out and "not supported yet (no issue yet)" in out
    listed = flat[flat.index("not supported yet (issue ") :]
    for flag in NOT_YET_FLAGS:
        assert re.search(rf"{re.escape(flag)}[,.) ]", listed), flag
    assert "--history-backend oracle;" in listed and "--policy passthrough;" in listed
    assert "--tool-call-parser deepseek32, deepseek_v4," in listed
    # hidden from the usage line and the served options: listed once, in their sections
    assert flat.count("--dp-minimum-tokens-scheduler") == 1


def rust_defaults() -> dict[str, str]:
    """flag -> the `(default: X)` text closing its help in the Rust gateway's --help."""
    defaults: dict[str, str] = {}
    flag, text = "", ""
    for line in [*HELP.splitlines(), "  --end"]:
        if line.startswith("  --") or not line.startswith("    "):
            found = re.findall(r"\(default: ([^()]*)\)", " ".join(text.split()))
            if flag and found:
                defaults[flag] = found[-1]
            flag, text = (line.split()[0], line) if line.startswith("  --") else ("", "")
        else:
            text += " " + line
    return defaults


# Served flags whose default is not the Rust gateway's, and why.
DEFAULTS_DIFFER = {
    # smg: a budget for all buffered request bodies together; the Rust gateway: what one request
    # may buffer to stay retryable (a different knob under the same name; issue 13 report)
    "--max-buffered-request-bytes",
    "--header-read-timeout-secs",  # smg's --header-timeout-secs: 10 s against slowloris
    "--idle-connection-timeout-secs",  # smg's --keepalive-timeout-secs: 75 s
    "--rate-limit-tokens-per-second",  # 0 (off) where the Rust gateway says None (off)
    # 64, not 1024: each running background response keeps a replay log of up to 4 MiB
    "--max-background-responses",
}


def _same(ours: object, rust: str) -> bool:
    if rust in ("None", "[]"):
        return ours in (None, (), [])
    if rust in ("True", "False"):
        return ours is (rust == "True")
    if isinstance(ours, int | float) and not isinstance(ours, bool):
        return float(ours) == float(rust)
    return str(ours) == rust


def test_served_flags_default_as_in_the_rust_gateway() -> None:
    from smg.cli import make_parser

    launch = make_parser()._subparsers._group_actions[0].choices["launch"]  # type: ignore[union-attr]
    served = launch._option_string_actions
    defaults = rust_defaults()
    assert len(defaults) > 150 and defaults["--port"] == "30000"
    differ = []
    for flag, rust in defaults.items():
        if flag in NOT_YET_FLAGS or flag not in served:
            continue
        if not _same(served[flag].default, rust):
            differ.append(flag)
    assert set(differ) == DEFAULTS_DIFFER


def test_the_rust_gateways_serve_command_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`smg --help` of the Rust gateway (tests/cli/rust_smg_help.txt) has launch and serve."""
    rust_commands = re.search(
        r"\{(.*)\}", Path(__file__).with_name("rust_smg_help.txt").read_text()
    )
    assert rust_commands is not None and rust_commands.group(1).split(",") == ["launch", "serve"]
    err = refusal(["serve", "--model-path", "m"], capsys)
    assert err == "smg: error: smg serve is not supported yet\n"


def test_parser_names_are_smgs_parsers_and_the_rest_of_the_rust_gateways() -> None:
    """A format smg lacks is refused by name, never run as passthrough; a name the Rust gateway
    lacks too is argparse's invalid choice."""
    from smg.config.tokenizer import REASONING_PARSER_NAMES, TOOL_CALL_PARSER_NAMES
    from smg.pipeline.parsers import REASONING_PARSERS, TOOL_PARSERS

    assert set(REASONING_PARSER_NAMES) == set(REASONING_PARSERS)
    assert set(TOOL_CALL_PARSER_NAMES) == set(TOOL_PARSERS)
    for flag, served in (
        ("--reasoning-parser", REASONING_PARSER_NAMES),
        ("--tool-call-parser", TOOL_CALL_PARSER_NAMES),
    ):
        metavar = next(m for names, m in OPTIONS if flag in names)
        rust = set(metavar[1:-1].split(","))
        assert set(served) | set(NOT_YET_VALUES[flag]) == rust
        assert not set(served) & set(NOT_YET_VALUES[flag])
    cfg = gateway_config_from(
        parse(["--tool-call-parser", "qwen", "--reasoning-parser", "qwen3"])[1]
    )
    assert (cfg.tokenizer.tool_call_parser, cfg.tokenizer.reasoning_parser) == ("qwen", "qwen3")


def test_a_parser_name_nobody_has_is_an_invalid_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid choice: 'qwen9'" in refusal(["--tool-call-parser", "qwen9"], capsys)


def test_the_rust_gateways_storage_env_vars_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its --help names them (`env: POSTGRES_DB_URL`, ...): SMG_<FLAG> wins, a flag over both."""
    monkeypatch.setenv("POSTGRES_DB_URL", "postgresql://u:p@db/smg")
    monkeypatch.setenv("POSTGRES_POOL_MAX", "3")
    monkeypatch.setenv("REDIS_RETENTION_DAYS", "-1")
    monkeypatch.setenv("REDIS_OP_TIMEOUT_SECS", "2")
    st = gateway_config_from(parse([])[1]).storage
    assert st.postgres_db_url == "postgresql://u:p@db/smg" and st.postgres_pool_max_size == 3
    assert st.redis_retention_days == -1 and st.history_timeout_secs == 2
    monkeypatch.setenv("SMG_POSTGRES_POOL_MAX_SIZE", "5")
    assert gateway_config_from(parse([])[1]).storage.postgres_pool_max_size == 5
    st = gateway_config_from(parse(["--postgres-pool-max", "7"])[1]).storage
    assert st.postgres_pool_max_size == 7


def test_the_entry_point_refuses_a_dstack_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`smg` itself (smg.cli.main, what the console script runs): exit 2 before anything starts."""
    from smg.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--dp-minimum-tokens-scheduler", "--history-backend", "postgres", "--port", "8000"])
    assert info.value.code == 2
    assert (
        capsys.readouterr().err
        == "smg launch: error: --dp-minimum-tokens-scheduler is not supported yet\n"
    )


def test_the_flag_table_for_the_closing_note() -> None:
    from cli.flag_table import flag_table

    rows = flag_table()
    assert len(rows) == 2 + 212 + 1 and rows[-1].endswith(
        f"{SERVED_COUNT} of 212 served, {NOT_YET_COUNT} not yet."
    )
    assert "| `--enable-igw` | served |" in rows
    assert "| `--dp-aware` | served |" in rows
    assert "| `--dp-minimum-tokens-scheduler` | not yet (no issue) |" in rows
    assert "| `--cache-threshold`, `--cache-match-threshold` | served |" in rows
