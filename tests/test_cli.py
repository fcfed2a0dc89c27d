import pytest

from smg.cli import gateway_config_from, parse


def test_defaults_follow_the_rust_gateway() -> None:
    command, ns = parse([])
    assert command == "launch"
    cfg = gateway_config_from(ns)
    assert cfg.server.port == 30000 and cfg.server.host == "0.0.0.0"
    assert cfg.routing.policy == "cache_aware"
    assert cfg.routing.cache_threshold == 0.3
    assert cfg.routing.balance_abs_threshold == 64
    assert cfg.routing.balance_rel_threshold == 1.5
    assert cfg.routing.max_tree_size == 67_108_864
    assert cfg.retry.retry_max_retries == 5 and cfg.retry.retry_initial_backoff_ms == 50
    assert cfg.breaker.cb_failure_threshold == 10 and cfg.breaker.cb_success_threshold == 3
    assert cfg.health.health_check_interval_secs == 60 and cfg.health.health_check_endpoint == (
        "/health"
    )
    assert cfg.admission.queue_size == 100 and cfg.admission.max_concurrent_requests == -1
    assert cfg.observability.prometheus_port == 29000
    assert cfg.server.max_payload_size == 536_870_912


def test_flags_parse_into_the_tree() -> None:
    _, ns = parse(
        [
            "launch",
            "--worker-urls",
            "http://a:1",
            "http://b:2",
            "--policy",
            "round_robin",
            "--disable-retries",
            "--eviction-interval",
            "5",
            "--cb-timeout-duration-secs",
            "2.5",
            "--api-key",
            "k",
            "--disable-kv-events",
        ]
    )
    cfg = gateway_config_from(ns)
    assert cfg.routing.disable_kv_events is True
    assert cfg.workers.worker_urls == ("http://a:1", "http://b:2")
    assert cfg.routing.policy == "round_robin"
    assert cfg.retry.disable_retries is True
    assert cfg.routing.eviction_interval_secs == 5.0
    assert cfg.breaker.cb_timeout_duration_secs == 2.5
    assert cfg.server.api_key == "k"


def test_no_subcommand_means_launch() -> None:
    command, ns = parse(["--port", "1234"])
    assert command == "launch" and gateway_config_from(ns).server.port == 1234


def test_env_vars_set_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMG_POLICY", "random")
    monkeypatch.setenv("SMG_QUEUE_SIZE", "7")
    monkeypatch.setenv("SMG_LOG_JSON", "true")
    cfg = gateway_config_from(parse([])[1])
    assert cfg.routing.policy == "random"
    assert cfg.admission.queue_size == 7
    assert cfg.observability.log_json is True
    # an explicit flag wins over the environment
    assert gateway_config_from(parse(["--queue-size", "3"])[1]).admission.queue_size == 3


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--policy", "nope"])


def test_sim_flags() -> None:
    command, ns = parse(["sim", "--port", "9", "--model", "m", "--failure-rate", "0.5"])
    assert command == "sim"
    from smg.cli import build_section
    from smg.config import SimConfig

    sim = build_section(SimConfig, ns, "sim.")
    assert sim.port == 9 and sim.model == "m" and sim.failure_rate == 0.5


def test_sim_provider_flags() -> None:
    from smg.cli import build_section
    from smg.config import SimConfig

    for name in ("openai", "anthropic", "gemini"):
        _, ns = parse(["sim", "--provider", name, "--provider-keys", "k", "--port", "9"])
        sim = build_section(SimConfig, ns, "sim.")
        assert (sim.provider, sim.provider_keys) == (name, ("k",))
    assert build_section(SimConfig, parse(["sim"])[1], "sim.").provider is None
    with pytest.raises(SystemExit):
        parse(["sim", "--provider", "nobody"])


def test_auth_flags_repeat_and_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = gateway_config_from(parse([])[1])
    assert cfg.auth.tenant_api_keys == () and cfg.auth.jwt_role_claim == "roles"
    assert cfg.auth.tenant_header_name == "x-smg-tenant-id" and not cfg.auth.trust_tenant_header
    _, ns = parse(
        [
            "--tenant-api-key", "a:k1", "--tenant-api-key", "b:k2",
            "--control-plane-api-keys", "ops:Ops team:admin:k3",
            "--jwt-role-mapping", "G.Admin=admin", "--jwt-role-mapping", "G.User=user",
            "--cors-allowed-origins", "https://a", "https://b",
            "--rate-limit-tenant-header", "x-org",  # the deprecated spelling
        ]
    )  # fmt: skip
    auth = gateway_config_from(ns).auth
    assert auth.tenant_api_keys == ("a:k1", "b:k2")
    assert auth.control_plane_api_keys == ("ops:Ops team:admin:k3",)  # a name may hold spaces
    assert auth.jwt_role_mapping == ("G.Admin=admin", "G.User=user")
    assert auth.cors_allowed_origins == ("https://a", "https://b")
    assert auth.tenant_header_name == "x-org"
    monkeypatch.setenv("SMG_TENANT_API_KEY", "a:k1,b:k2")
    assert gateway_config_from(parse([])[1]).auth.tenant_api_keys == ("a:k1", "b:k2")


def test_limits_flags_and_the_connection_cap_from_the_open_file_limit() -> None:
    from smg.config import ConfigError, LimitsConfig, check_limits, effective_max_connections

    _, ns = parse(["launch", "--header-timeout-secs", "3", "--max-connections", "500"])
    lim = gateway_config_from(ns).limits
    assert lim.header_timeout_secs == 3.0 and lim.max_connections == 500
    assert lim.max_buffered_request_bytes == 32 * 2**20 and lim.keepalive_timeout_secs == 75
    assert effective_max_connections(lim, 20_000) == 500
    assert effective_max_connections(LimitsConfig(), 20_000) == 10_000  # half the fd limit
    assert effective_max_connections(LimitsConfig(), 100) == 64
    assert effective_max_connections(LimitsConfig(max_connections=0), 100) == 0  # no cap
    with pytest.raises(ConfigError, match="--max-buffered-request-bytes must be > 0"):
        check_limits(LimitsConfig(max_buffered_request_bytes=0))


@pytest.mark.parametrize("command", ["launch", "node", "sim", "dev"])
def test_every_commands_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse %-formats help texts: a literal `%` in one (the tree's "90%") must not crash."""
    with pytest.raises(SystemExit) as info:
        parse([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: smg {command}")
    if command in ("launch", "node"):  # the gateway's flags, the tree's bound among them
        assert "evicted from 90% on" in " ".join(out.split())
