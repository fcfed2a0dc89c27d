"""smg/tls.py: the TLS contexts and the start-up checks of their files.

Handshakes run between contexts over memory buffers (`tls_certs.handshake`), so the rules (who is
trusted, whose certificate is required, which host name) are tested without sockets.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from support.tls_certs import Pki, handshake, make_pki

from smg.cli import gateway_config_from, parse
from smg.config import ConfigError, TlsConfig
from smg.tls import H2, GatewayTls, ServerTls, WorkerTls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server(pki: Pki, client_ca: Path | None = None) -> ssl.SSLContext:
    tls = ServerTls.load(str(pki.server.cert), str(pki.server.key), client_ca and str(client_ca))
    assert tls is not None
    return tls.context


def _workers(pki: Pki, *, ca: bool = True, cert: bool = True) -> WorkerTls:
    return WorkerTls.load(
        TlsConfig(
            ca_cert_paths=(str(pki.ca_path),) if ca else (),
            client_cert_path=str(pki.client.cert) if cert else None,
            client_key_path=str(pki.client.key) if cert else None,
        )
    )


def _serial(pem_path: Path) -> int:
    return x509.load_pem_x509_certificate(pem_path.read_bytes()).serial_number


# --- the rules, as handshakes --------------------------------------------------------------------


def test_gateway_listener_serves_tls12_plus_with_http11(pki: Pki) -> None:
    ctx = GatewayTls.load(
        TlsConfig(tls_cert_path=str(pki.server.cert), tls_key_path=str(pki.server.key))
    ).server
    assert ctx is not None
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE  # clients authenticate with keys, not certificates
    client = pki.client_context(present_cert=False)
    client.set_alpn_protocols(["h2", "http/1.1"])
    c, _ = handshake(client, ctx)
    assert c.selected_alpn_protocol() == "http/1.1"


def test_no_server_certificate_means_plaintext(pki: Pki) -> None:
    assert GatewayTls.load(TlsConfig()).server is None


def test_worker_contexts_verify_against_the_given_ca_only(pki: Pki) -> None:
    tls = _workers(pki)
    for ctx in (tls.http, tls.h2):
        assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
        # only the test CA: the system store is not mixed in
        assert [int(c["serialNumber"], 16) for c in ctx.get_ca_certs()] == [_serial(pki.ca_path)]
    c, _ = handshake(tls.http, _server(pki))
    assert c.selected_alpn_protocol() == "http/1.1"
    c, _ = handshake(tls.h2, _server(pki))
    assert c.selected_alpn_protocol() is None  # an HTTP/1.1-only server: the lean client refuses
    h2_server = ServerTls.load(str(pki.server.cert), str(pki.server.key), alpn=H2)
    assert h2_server is not None
    c, _ = handshake(tls.h2, h2_server.context)
    assert c.selected_alpn_protocol() == "h2"
    assert tls.ca_pem == pki.ca_path.read_bytes()
    assert tls.cert_pem == pki.client.cert.read_bytes()
    assert tls.key_pem == pki.client.key.read_bytes()


def test_a_worker_signed_by_another_ca_is_refused(pki: Pki, tmp_path: Path) -> None:
    tls = WorkerTls.load(TlsConfig(ca_cert_paths=(str(pki.other_ca_path),)))
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tls.http, _server(pki))


def test_a_worker_certificate_for_another_host_is_refused(pki: Pki) -> None:
    tls = _workers(pki)
    wrong = ServerTls.load(str(pki.wrong_host.cert), str(pki.wrong_host.key))
    assert wrong is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        handshake(tls.http, wrong.context, "127.0.0.1")
    handshake(tls.http, wrong.context, "elsewhere.example")  # its own name is fine


def test_several_ca_files_are_all_trusted(pki: Pki) -> None:
    tls = WorkerTls.load(TlsConfig(ca_cert_paths=(str(pki.other_ca_path), str(pki.ca_path))))
    handshake(tls.http, _server(pki))
    assert len(tls.http.get_ca_certs()) == 2


def test_mutual_tls_needs_the_client_certificate(pki: Pki) -> None:
    server = _server(pki, client_ca=pki.ca_path)
    handshake(_workers(pki).http, server)
    with pytest.raises(ssl.SSLError):
        handshake(_workers(pki, cert=False).http, server)
    other = WorkerTls.load(
        TlsConfig(
            ca_cert_paths=(str(pki.ca_path),),
            client_cert_path=str(pki.other_client.cert),
            client_key_path=str(pki.other_client.key),
        )
    )
    with pytest.raises(ssl.SSLError):
        handshake(other.http, server)


def test_without_ca_flags_workers_are_checked_against_the_system_store(pki: Pki) -> None:
    tls = WorkerTls.system()
    assert tls.http.verify_mode == ssl.CERT_REQUIRED and tls.cert_pem is None
    with pytest.raises(ssl.SSLCertVerificationError):  # the test CA is nobody's root
        handshake(tls.http, _server(pki))
    cafile = ssl.get_default_verify_paths().cafile
    assert tls.ca_pem == (Path(cafile).read_bytes() if cafile else None)


# --- start-up errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tls_cert_path": "s.pem"}, "--tls-cert-path needs --tls-key-path"),
        ({"tls_key_path": "s.key"}, "--tls-key-path needs --tls-cert-path"),
        ({"client_cert_path": "c.pem"}, "--client-cert-path needs --client-key-path"),
        ({"client_key_path": "c.key"}, "--client-key-path needs --client-cert-path"),
    ],
)
def test_cert_and_key_come_in_pairs(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GatewayTls.load(TlsConfig(**fields))


def test_a_client_ca_needs_a_server_certificate() -> None:
    with pytest.raises(ConfigError, match="--tls-client-ca-path needs --tls-cert-path"):
        ServerTls.load(None, None, "ca.pem")


def _encrypted_key(pki: Pki, folder: Path) -> Path:
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), None)
    path = folder / "encrypted.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return path


def test_bad_files_are_clear_start_up_errors(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a certificate\n")
    other_key = make_pki(tmp_path / "other").server.key
    cert, key = str(pki.server.cert), str(pki.server.key)
    cases = [
        (TlsConfig(tls_cert_path=str(tmp_path / "nope.pem"), tls_key_path=key),
         r"--tls-cert-path .*nope\.pem: cannot read it"),
        (TlsConfig(tls_cert_path=str(tmp_path), tls_key_path=key),
         "--tls-cert-path .*: cannot read it"),
        (TlsConfig(tls_cert_path=str(garbage), tls_key_path=key),
         "--tls-cert-path .*garbage.pem: no PEM certificate"),
        (TlsConfig(tls_cert_path=cert, tls_key_path=cert),
         "--tls-key-path .*: no PEM private key"),
        (TlsConfig(tls_cert_path=cert, tls_key_path=str(other_key)),
         "--tls-key-path .* is not the key of --tls-cert-path"),
        (TlsConfig(tls_cert_path=cert, tls_key_path=str(_encrypted_key(pki, tmp_path))),
         "--tls-key-path .*: the key is encrypted"),
        (TlsConfig(ca_cert_paths=(str(pki.ca_path), str(tmp_path / "missing-ca.pem"))),
         r"--ca-cert-paths .*missing-ca\.pem: cannot read it"),
        (TlsConfig(ca_cert_paths=(key,)), "--ca-cert-paths .*: no PEM certificate"),
        (TlsConfig(client_cert_path=str(pki.client.cert), client_key_path=key),
         "--client-key-path .* is not the key of --client-cert-path"),
    ]  # fmt: skip
    for cfg, message in cases:
        with pytest.raises(ConfigError, match=message):
            GatewayTls.load(cfg)


def test_an_encrypted_key_never_prompts(pki: Pki, tmp_path: Path) -> None:
    """A key whose PEM does not say it is encrypted (the check before loading misses it) still
    fails with the clear error, not a password prompt on the terminal."""
    encrypted = _encrypted_key(pki, tmp_path).read_bytes()
    disguised = tmp_path / "disguised.key"
    disguised.write_bytes(encrypted.replace(b"ENCRYPTED PRIVATE KEY", b"PRIVATE KEY"))
    with pytest.raises(ConfigError):
        ServerTls.load(str(pki.server.cert), str(disguised))


def test_a_ca_bundle_with_a_broken_certificate_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pem"
    pem = trustme.CA().cert_pem.bytes()
    broken.write_bytes(pem[:60] + b"!!!!" + pem[64:])
    with pytest.raises(ConfigError, match="--ca-cert-paths: not a usable CA certificate"):
        WorkerTls.load(TlsConfig(ca_cert_paths=(str(broken),)))


# --- flags ---------------------------------------------------------------------------------------


def test_flags_follow_the_rust_gateway(pki: Pki) -> None:
    _, ns = parse(
        [
            "launch",
            "--tls-cert-path", "s.pem", "--tls-key-path", "s.key",
            "--client-cert-path", "c.pem", "--client-key-path", "c.key",
            "--ca-cert-paths", "a.pem", "b.pem", "--ca-cert-paths", "c.pem",
        ]
    )  # fmt: skip
    tls = gateway_config_from(ns).tls
    assert (tls.tls_cert_path, tls.tls_key_path) == ("s.pem", "s.key")
    assert (tls.client_cert_path, tls.client_key_path) == ("c.pem", "c.key")
    assert tls.ca_cert_paths == ("a.pem", "b.pem", "c.pem")  # repeatable, as in the Rust one


def test_ca_flag_replaces_the_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMG_CA_CERT_PATHS", "env1.pem,env2.pem")
    _, ns = parse(["launch"])
    assert gateway_config_from(ns).tls.ca_cert_paths == ("env1.pem", "env2.pem")
    _, ns = parse(["launch", "--ca-cert-paths", "x.pem", "--ca-cert-paths", "y.pem"])
    assert gateway_config_from(ns).tls.ca_cert_paths == ("x.pem", "y.pem")
