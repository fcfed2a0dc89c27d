"""The auth decision as a table (smg/core/auth.py): route classes, the gate's answer for each
configuration, peer, Host, Origin and credential, the request predicates, and the CLI syntax of
keys (smg/core/auth_keys.py)."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from support.examples import examples

from smg import errors
from smg.api.audit import clean
from smg.config import (
    AuthConfig,
    ConfigError,
    GatewayConfig,
    McpConfig,
    ServerConfig,
    replace_path,
)
from smg.core.auth import (
    Gate,
    JwtCheck,
    RouteClass,
    classify,
    host_name,
    is_json_content_type,
    is_loopback_address,
)
from smg.core.auth_keys import (
    LOOPBACK,
    Principal,
    Role,
    control_plane_table,
    data_plane_key,
    data_plane_table,
    digest,
    role_mapping,
)
from smg.core.auth_keys import bearer as bearer_token
from smg.core.jwt_rules import JwtSettings
from smg.mcp_client.pool import McpPool
from smg.storage.memory import MemoryStorage

PUBLIC, DATA, ADMIN, METRICS = (
    RouteClass.PUBLIC,
    RouteClass.DATA,
    RouteClass.ADMIN,
    RouteClass.METRICS,
)


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        ("/health", PUBLIC), ("/liveness", PUBLIC), ("/readiness", PUBLIC),
        ("/v1/chat/completions", DATA), ("/v1/completions", DATA), ("/v1/embeddings", DATA),
        ("/v1/models", DATA), ("/v1/tokenize", DATA), ("/v1/detokenize", DATA),
        ("/v1/responses", DATA), ("/generate", DATA), ("/rerank", DATA), ("/v1/rerank", DATA),
        ("/v1/classify", DATA),
        ("/workers", ADMIN), ("/workers/{worker_id}", ADMIN), ("/get_loads", ADMIN),
        ("/flush_cache", ADMIN), ("/parse/reasoning", ADMIN), ("/parse/function_call", ADMIN),
        ("/mesh/status", ADMIN), ("/mesh/faults", ADMIN), ("/v1/tokenizers", ADMIN),
        ("/v1/tokenizers/{id}", ADMIN), ("/metrics", ADMIN), ("/anything/new", ADMIN),
        ("/v1", ADMIN), ("/generate/x", ADMIN), ("/healthz", ADMIN),
    ],
)  # fmt: skip
def test_route_classes(path: str, cls: RouteClass) -> None:
    assert classify(path) is cls


EXPECTED_ROUTES = {
    "/v1/chat/completions": DATA, "/v1/completions": DATA, "/v1/embeddings": DATA,
    "/generate": DATA, "/rerank": DATA, "/v1/rerank": DATA, "/v1/classify": DATA,
    "/v1/tokenize": DATA, "/v1/detokenize": DATA, "/v1/models": DATA,
    "/v1/responses": DATA, "/v1/responses/{id}": DATA, "/v1/responses/{id}/input_items": DATA,
    "/v1/responses/{id}/cancel": DATA, "/v1/messages": DATA, "/v1/messages/count_tokens": DATA,
    "/v1/conversations": DATA, "/v1/conversations/{id}": DATA,
    "/v1/conversations/{id}/items": DATA, "/v1/conversations/{id}/items/{item_id}": DATA,
    "/parse/function_call": ADMIN, "/parse/reasoning": ADMIN, "/get_loads": ADMIN,
    "/workers": ADMIN, "/workers/{worker_id}": ADMIN, "/mesh/status": ADMIN, "/mesh/faults": ADMIN,
    "/flush_cache": ADMIN, "/engine_metrics": ADMIN,
    "/health": PUBLIC, "/liveness": PUBLIC, "/readiness": PUBLIC,
}  # fmt: skip


async def test_every_installed_route_has_its_intended_class() -> None:
    """A route added without a thought lands on the control plane; this lists the decisions."""
    from smg.app.gateway import Gateway

    mesh = {"enable_mesh": True, "mesh_fault_injection": True, "mesh_host": "127.0.0.1"}
    cfg = replace_path(GatewayConfig(), "mesh", **mesh)  # on loopback: needs no cluster key
    cfg = replace_path(cfg, "pd", pd_disaggregation=True)
    gw = Gateway(cfg)
    app = gw.build_app(None, MemoryStorage(), McpPool(McpConfig(), clock=gw.clock))  # type: ignore[arg-type]
    installed = {r.canonical: classify(r.canonical) for r in app.router.resources()}
    assert installed == EXPECTED_ROUTES


# --- the decision table ---------------------------------------------------------------------------

K, T, A, U = "shared-key-1", "team-key-1", "admin-key-1", "user-key-1"
JSON = {"Content-Type": "application/json"}
LOCAL = {"Host": "127.0.0.1:30000", **JSON}
JWT = JwtSettings("https://idp", "aud", None)


def gate(*, data: bool = False, cp: bool = False, jwt: bool = False, **options: Any) -> Gate:
    return Gate(
        data_keys=data_plane_table(K, [f"team:{T}"]) if data else {},
        cp_keys=control_plane_table([f"ops:Ops:admin:{A}", f"view:View:user:{U}"]) if cp else {},
        jwt=JWT if jwt else None,
        **options,
    )


def outcome(g: Gate, cls: RouteClass, headers: dict[str, str], peer: str | None = "127.0.0.1",
            method: str = "POST") -> Any:  # fmt: skip
    try:
        p = g.decide(cls, method, CIMultiDict(headers), peer)  # as aiohttp: any case
    except errors.ApiError as err:
        return (err.status, err.code)
    return p if isinstance(p, JwtCheck) else (p.auth_method, p.tenant, p.role)


def bearer(key: str, **h: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **JSON, **h}


REMOTE = "192.0.2.9"
KEY_TENANT = "key:" + digest(K).hex()[:16]

LO = "127.0.0.1"
LB = ("loopback", "loopback", Role.ADMIN)
XO = (403, "cross_origin_forbidden")
BAD_KEY = (401, "invalid_api_key")
LOCAL_ONLY = (403, "loopback_only")
TEAM = ("tenant_api_key", "tenant:team", None)
OPS = ("control_plane_key", "cp:ops", Role.ADMIN)
TABLE: list[tuple[str, dict[str, Any], RouteClass, dict[str, str], str | None, Any]] = [
    # nothing configured: local callers only, on both planes
    ("keyless local data", {}, DATA, LOCAL, LO, LB),
    ("keyless local admin", {}, ADMIN, LOCAL, "::1", LB),
    ("keyless mapped v6", {}, ADMIN, LOCAL, "::ffff:127.0.0.2", LB),
    ("keyless remote data", {}, DATA, LOCAL, REMOTE, LOCAL_ONLY),
    ("keyless remote admin", {}, ADMIN, LOCAL, REMOTE, LOCAL_ONLY),
    ("keyless remote metrics", {}, METRICS, LOCAL, REMOTE, LOCAL_ONLY),
    ("keyless no peer", {}, DATA, LOCAL, None, LOCAL_ONLY),
    ("rebinding Host", {}, ADMIN, {**JSON, "Host": "evil.example"}, LO, (403, "untrusted_host")),
    ("no Host", {}, DATA, JSON, LO, (403, "untrusted_host")),
    ("relayed by a local proxy", {}, DATA, {**LOCAL, "X-Forwarded-For": "203.0.113.5"}, LO,
     LOCAL_ONLY),
    ("relayed (Forwarded)", {}, ADMIN, {**LOCAL, "Forwarded": "for=203.0.113.5"}, LO, LOCAL_ONLY),
    ("relayed (X-Real-IP)", {}, METRICS, {**LOCAL, "x-real-ip": "203.0.113.5"}, LO, LOCAL_ONLY),
    ("cross origin", {}, DATA, {**LOCAL, "Origin": "http://evil.example"}, LO,
     XO),
    ("same origin", {}, DATA, {**LOCAL, "Origin": "http://127.0.0.1:30000"}, LO,
     LB),
    ("sec-fetch cross-site", {}, ADMIN, {**LOCAL, "Sec-Fetch-Site": "cross-site"}, LO,
     XO),
    # the keyless data plane's checks past the fast paths (a browser's headers in any case)
    ("cross origin, lower case", {}, DATA, {**LOCAL, "origin": "http://evil.example"}, LO, XO),
    ("sec-fetch cross-site, data", {}, DATA, {**LOCAL, "sec-fetch-site": "cross-site"}, LO, XO),
    ("sec-fetch same-origin, data", {}, DATA, {**LOCAL, "Sec-Fetch-Site": "same-origin"}, LO, LB),
    ("relayed (Forwarded), data", {}, DATA, {**LOCAL, "forwarded": "for=a"}, LO, LOCAL_ONLY),
    ("relayed (X-Real-IP), data", {}, DATA, {**LOCAL, "X-Real-IP": "203.0.113.5"}, LO,
     LOCAL_ONLY),
    ("allowed origin", {"cors_origins": frozenset({"https://ui.example"})}, DATA,
     {**LOCAL, "Origin": "https://UI.example/"}, LO, LB),
    ("text/plain", {}, DATA, {"Host": "localhost", "Content-Type": "text/plain"}, LO,
     (415, "unsupported_media_type")),
    ("no content type", {}, ADMIN, {"Host": "localhost"}, LO, (415, "unsupported_media_type")),
    # --allow-unauthenticated: anyone on the data plane, by address; never the control plane
    ("open remote", {"allow_unauthenticated": True}, DATA, {**JSON, "Host": "gw"}, REMOTE,
     ("anonymous", f"ip:{REMOTE}", None)),
    ("open remote admin", {"allow_unauthenticated": True}, ADMIN, LOCAL, REMOTE, LOCAL_ONLY),
    ("open cross origin", {"allow_unauthenticated": True}, DATA, {**JSON, "Origin": "http://e"},
     REMOTE,
     XO),
    # data-plane keys
    ("shared key", {"data": True}, DATA, bearer(K), REMOTE, ("api_key", KEY_TENANT, None)),
    ("tenant key", {"data": True}, DATA, bearer(T), REMOTE, TEAM),
    ("lower-case scheme", {"data": True}, DATA, {"Authorization": f"bearer {T}", **JSON}, REMOTE,
     TEAM),
    ("no key", {"data": True}, DATA, JSON, LO, BAD_KEY),
    ("wrong key", {"data": True}, DATA, bearer("nope"), REMOTE, BAD_KEY),
    ("key without scheme", {"data": True}, DATA, {"Authorization": K, **JSON}, REMOTE, BAD_KEY),
    ("x-api-key", {"data": True}, DATA, {"x-api-key": K, **JSON}, REMOTE,
     ("api_key", KEY_TENANT, None)),
    ("wrong x-api-key", {"data": True}, DATA, {"X-Api-Key": "nope", **JSON}, REMOTE, BAD_KEY),
    ("x-api-key on cp", {"cp": True}, ADMIN, {"x-api-key": A, **JSON}, REMOTE, BAD_KEY),
    ("keyed cross origin", {"data": True}, DATA, bearer(K, Origin="http://e"), REMOTE,
     ("api_key", KEY_TENANT, None)),
    ("cp key on data", {"data": True, "cp": True}, DATA, bearer(A), REMOTE, BAD_KEY),
    ("data key, keyless cp, remote", {"data": True}, ADMIN, bearer(K), REMOTE, LOCAL_ONLY),
    ("data key, keyless cp, local", {"data": True}, ADMIN, {**bearer(K), **LOCAL}, LO,
     LB),
    # control-plane keys
    ("admin key", {"cp": True}, ADMIN, bearer(A), REMOTE, OPS),
    ("user key", {"cp": True}, ADMIN, bearer(U), REMOTE, (403, "admin_role_required")),
    ("user key metrics", {"cp": True}, METRICS, bearer(U), REMOTE,
     ("control_plane_key", "cp:view", Role.USER)),
    ("data key on cp", {"cp": True, "data": True}, ADMIN, bearer(K), REMOTE, BAD_KEY),
    ("cp, local, no key", {"cp": True}, ADMIN, LOCAL, LO, BAD_KEY),
    ("cp, cross origin", {"cp": True}, ADMIN, bearer(A, Origin="http://e"), REMOTE,
     XO),
    ("metrics cross origin with key", {"cp": True}, METRICS, bearer(U, Origin="http://e"), REMOTE,
     ("control_plane_key", "cp:view", Role.USER)),
    # JWT: a token shaped like one goes to the verifier; keys are looked up first
    ("jwt", {"jwt": True}, ADMIN, bearer("a.b.c"), REMOTE, JwtCheck("a.b.c", Role.ADMIN)),
    ("jwt metrics", {"jwt": True}, METRICS, bearer("a.b.c"), REMOTE, JwtCheck("a.b.c", Role.USER)),
    ("not a jwt", {"jwt": True}, ADMIN, bearer("abc"), REMOTE, BAD_KEY),
    ("jwt on data", {"jwt": True, "data": True}, DATA, bearer("a.b.c"), REMOTE, BAD_KEY),
    # trusted tenant header: shared-key and keyless callers only
    ("trusted header, shared key", {"data": True, "trust_tenant_header": True}, DATA,
     bearer(K, **{"x-smg-tenant-id": " acme "}), REMOTE, ("api_key", "header:acme", None)),
    ("trusted header, tenant key", {"data": True, "trust_tenant_header": True}, DATA,
     bearer(T, **{"x-smg-tenant-id": "acme"}), REMOTE, TEAM),
    ("untrusted header", {"data": True}, DATA, bearer(K, **{"x-smg-tenant-id": "acme"}), REMOTE,
     ("api_key", KEY_TENANT, None)),
    ("trusted header, keyless", {"trust_tenant_header": True}, DATA,
     {**LOCAL, "x-smg-tenant-id": "a"},
     LO, ("loopback", "header:a", Role.ADMIN)),
    ("bad header value", {"trust_tenant_header": True}, DATA,
     {**LOCAL, "x-smg-tenant-id": "a b"}, LO, LB),
    ("custom header name", {"trust_tenant_header": True, "tenant_header": "x-org"}, DATA,
     {**LOCAL, "x-org": "o1", "x-smg-tenant-id": "a"}, LO, ("loopback", "header:o1", Role.ADMIN)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "cls", "headers", "peer", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_decision_table(
    config: dict[str, Any],
    cls: RouteClass,
    headers: dict[str, str],
    peer: str | None,
    expected: Any,
) -> None:
    assert outcome(gate(**config), cls, headers, peer) == expected


def test_get_needs_no_content_type_and_bound_host_is_local() -> None:
    g = gate(bound_host="10.1.2.3")
    assert outcome(g, ADMIN, {"Host": "10.1.2.3:30000"}, method="GET") == (
        "loopback", "loopback", Role.ADMIN,
    )  # fmt: skip
    assert outcome(g, ADMIN, {"Host": "10.1.2.4"}, method="GET") == (403, "untrusted_host")


@settings(max_examples=examples(200), deadline=None)
@given(
    auth=st.none()
    | st.sampled_from(["Bearer ", "bearer ", "BEARER  ", "Basic ", "Bearer"]).flatmap(
        lambda scheme: st.text(" \tk.-", max_size=6).map(lambda t: scheme + t)
    ),
    api_key=st.none() | st.text(" \tk", max_size=4),
)
def test_the_data_plane_key_is_the_bearer_token_else_x_api_key(
    auth: str | None, api_key: str | None
) -> None:
    """`data_plane_key` (bearer parsing written out) says what `bearer`, then x-api-key, say."""
    headers: CIMultiDict[str] = CIMultiDict()
    if auth is not None:
        headers["Authorization"] = auth
    if api_key is not None:
        headers["X-Api-Key"] = api_key
    expected = bearer_token(headers) or (api_key or "").strip() or None
    assert data_plane_key(headers) == expected


def test_a_host_judged_for_one_gate_is_judged_again_for_another() -> None:
    """The Host cache is keyed by the gate's bound names too: a name local to one gate (its
    bound address) is not local to a gate bound elsewhere."""
    host = {**JSON, "Host": "10.1.2.3:30000"}
    for _ in range(2):  # the second round is served from the cache
        assert outcome(gate(bound_host="10.1.2.3"), DATA, host) == LB
        assert outcome(gate(), DATA, host) == (403, "untrusted_host")
        assert outcome(gate(bound_host="10.9.9.9"), DATA, host) == (403, "untrusted_host")


def test_role_check_after_jwt() -> None:
    g = gate(jwt=True)
    user = Principal("bob", "jwt", "jwt:bob", Role.USER)
    assert g.authorize(user, Role.USER) is user
    with pytest.raises(errors.ApiError) as info:
        g.authorize(user, Role.ADMIN)
    assert (info.value.status, info.value.code) == (403, "admin_role_required")


def test_exposure_warnings() -> None:
    assert gate().exposure("127.0.0.1", "127.0.0.1") == []
    assert gate(data=True, cp=True).exposure("0.0.0.0", "0.0.0.0") == []
    lines = gate().exposure("0.0.0.0", "::")
    assert len(lines) == 3 and all("loopback only" in line for line in lines)
    assert "--api-key" in lines[0] and "--control-plane-api-keys" in lines[1]
    assert "open to anyone" in gate(allow_unauthenticated=True).exposure("::", None)[0]


# --- predicates -----------------------------------------------------------------------------------


@given(st.ip_addresses())
def test_loopback_address_matches_ipaddress(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    want = ip.is_loopback or (
        isinstance(ip, ipaddress.IPv6Address)
        and ip.ipv4_mapped is not None
        and ip.ipv4_mapped.is_loopback
    )
    assert is_loopback_address(str(ip)) is want


@pytest.mark.parametrize(
    ("text", "loopback"),
    [("127.0.0.1", True), ("127.255.0.9", True), ("::1", True), ("::ffff:127.0.0.1", True),
     ("::1%lo", True), ("0.0.0.0", False), ("::", False), ("128.0.0.1", False),
     ("::ffff:10.0.0.1", False), ("localhost", False), ("", False), (None, False),
     ("1.2.3", False)],
)  # fmt: skip
def test_loopback_address_table(text: str | None, loopback: bool) -> None:
    assert is_loopback_address(text) is loopback


@pytest.mark.parametrize(
    ("host", "name"),
    [("localhost", "localhost"), ("localhost:30000", "localhost"), ("[::1]:80", "::1"),
     ("[::1]", "::1"), ("127.0.0.1:1", "127.0.0.1"), ("::1", "::1"), ("[bad", ""),
     ("evil.example:x", "evil.example:x")],
)  # fmt: skip
def test_host_name(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize(
    ("ct", "ok"),
    [("application/json", True), ("application/json; charset=utf-8", True),
     ("APPLICATION/JSON", True), (" application/json ;x=1", True),
     ("application/vnd.api+json", True), ("application/problem+json; charset=utf-8", True),
     ("text/plain", False), ("application/x-www-form-urlencoded", False),
     ("multipart/form-data; boundary=x", False), ("", False), (None, False), ("json", False),
     ("+json", False), ("application/jsonx", False), ("text/plain; x=application/json", False)],
)  # fmt: skip
def test_json_content_types(ct: str | None, ok: bool) -> None:
    assert is_json_content_type(ct) is ok


# --- key syntax -----------------------------------------------------------------------------------


def test_tables_hold_digests_and_identities() -> None:
    table = data_plane_table("k-1", ["a:k-2", "b:k:with:colons"])
    assert table[digest("k:with:colons")].tenant == "tenant:b"
    assert table[digest("k-2")] == Principal("a", "tenant_api_key", "tenant:a")
    assert table[digest("k-1")].auth_method == "api_key"
    cp = control_plane_table(["ops:Ops team:ADMIN:s:e:c"])
    assert cp[digest("s:e:c")] == Principal(
        "ops", "control_plane_key", "cp:ops", Role.ADMIN, "Ops team"
    )
    assert role_mapping(["a=b=admin", "G.User=user"]) == {"a=b": Role.ADMIN, "G.User": Role.USER}


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: data_plane_table("", []), "empty"),
        (lambda: data_plane_table("a b", []), "visible ASCII"),
        (lambda: data_plane_table(None, ["nocolon"]), "TENANT:KEY"),
        (lambda: data_plane_table(None, [":k"]), "tenant id"),
        (lambda: data_plane_table(None, ["t" * 129 + ":k"]), "tenant id"),
        (lambda: data_plane_table("k", ["t:k"]), "already configured"),
        (lambda: data_plane_table(None, ["t:"]), "empty"),
        (lambda: control_plane_table(["a:b:admin"]), "ID:NAME:ROLE:KEY"),
        (lambda: control_plane_table(["a:b:owner:k"]), "ROLE"),
        (lambda: control_plane_table(["a:b:admin:k", "a:c:user:k2"]), "twice"),
        (lambda: control_plane_table(["a:b:admin:k", "b:c:user:k"]), "already configured"),
        (lambda: role_mapping(["admin"]), "IDP_ROLE"),
        (lambda: role_mapping(["=admin"]), "IDP_ROLE"),
        (lambda: Gate(data_keys=data_plane_table("k", []),
                      cp_keys=control_plane_table(["a:b:admin:k"])), "both"),
    ],
)  # fmt: skip
def test_bad_keys_are_config_errors(build: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build()


def _cfg(**auth: Any) -> GatewayConfig:
    return dataclasses.replace(GatewayConfig(), server=ServerConfig(), auth=AuthConfig(**auth))


@pytest.mark.parametrize(
    ("auth", "says"),
    [
        ({"jwt_issuer": "https://i"}, "both"),
        ({"jwt_audience": "a"}, "both"),
        ({"jwt_issuer": "http://i", "jwt_audience": "a"}, "https://"),
        ({"jwt_issuer": "https://i", "jwt_audience": "a", "jwt_jwks_uri": "ftp://x"},
         "--jwt-jwks-uri"),
        ({"jwt_issuer": "https://i", "jwt_audience": "a", "jwt_role_claim": " "}, "role-claim"),
        ({"jwt_jwks_uri": "/k.json"}, "need --jwt-issuer"),
        ({"cors_allowed_origins": ("ui.example",)}, "scheme://"),
        ({"tenant_header_name": " "}, "tenant-header-name"),
        ({"allow_unauthenticated": True, "tenant_api_keys": ("t:k",)}, "allow-unauthenticated"),
    ],
)  # fmt: skip
def test_bad_auth_flags(auth: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Gate.from_config(_cfg(**auth))


def test_good_jwt_sources() -> None:
    for uri in (
        None,
        "https://idp/keys",
        "http://127.0.0.1:8/k",
        "/etc/jwks.json",
        "file:///x.json",
    ):
        g = Gate.from_config(_cfg(jwt_issuer="https://i", jwt_audience="a", jwt_jwks_uri=uri))
        assert g.jwt is not None and g.cp_configured and g.jwt.jwks_uri == uri
    assert Gate.from_config(_cfg()).jwt is None


def test_loopback_principal_is_admin() -> None:
    assert LOOPBACK.role is Role.ADMIN and LOOPBACK.tenant == "loopback"


@pytest.mark.parametrize(
    ("text", "out"),
    [("/workers", "/workers"), ("a\nb", "a\\nb"), ("a\r\n\x00\x1b", "a\\r\\n\\x00\\x1b"),
     ("x" * 300, "x" * 256 + "...[truncated]"), ("é", "é")],
)  # fmt: skip
def test_audit_fields_are_one_clean_line(text: str, out: str) -> None:
    assert clean(text) == out
