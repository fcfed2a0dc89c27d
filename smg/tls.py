"""TLS for every connection the gateway makes or takes, built once at start-up.

* The gateway's own listeners (`--tls-cert-path`, `--tls-key-path`): TLS >= 1.2 with the standard
  library's server defaults (`ssl.create_default_context(Purpose.CLIENT_AUTH)`: its cipher list,
  no compression), no TLS 1.2 renegotiation, ALPN `http/1.1`.
* Workers behind `https://` and `grpcs://` URLs (`--ca-cert-paths`, `--client-cert-path`,
  `--client-key-path`): their certificate must chain to one of the given CAs (none given: the
  system's trust store) and name the host of the URL; the client certificate, when given, is
  presented (mutual TLS). One context for HTTP/1.1 (aiohttp), one offering only `h2` for the lean
  gRPC client, and the same files as PEM bytes for grpc.aio's channel credentials, which take
  bytes rather than paths.

Files are read and checked here, before anything listens: a missing or unreadable file, a file
with no certificate, an encrypted key, a key that does not match its certificate, or half of a
cert/key pair is a `ConfigError` naming the flag. No asyncio, sockets or grpc: only file reads.
Contexts are not reloaded: a renewed certificate takes a restart.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from smg.config import ConfigError, TlsConfig

HTTP1 = ("http/1.1",)
H2 = ("h2",)


class _Encrypted(Exception):
    """Raised from the password callback: we never prompt on a terminal for a key's password."""


def _no_password() -> bytes:
    raise _Encrypted


def _encrypted(flag: str, path: str) -> ConfigError:
    return ConfigError(f"{flag} {path}: the key is encrypted; give an unencrypted key")


def _pair(cert: str | None, key: str | None, cert_flag: str, key_flag: str) -> bool:
    """Whether a cert/key pair is configured; exactly one of the two is an error."""
    if (cert is None) != (key is None):
        given, missing = (cert_flag, key_flag) if cert is not None else (key_flag, cert_flag)
        raise ConfigError(f"{given} needs {missing} too (both or neither)")
    return cert is not None


def read_pem(path: str, flag: str, what: str = "CERTIFICATE") -> bytes:
    """The file's bytes, which must hold at least one PEM block of kind `what` ("CERTIFICATE",
    or "PRIVATE KEY", which also matches "RSA PRIVATE KEY" and "EC PRIVATE KEY")."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if b"ENCRYPTED PRIVATE KEY" in data or b"Proc-Type: 4,ENCRYPTED" in data:
        raise _encrypted(flag, path)
    if f"{what}-----".encode() not in data:
        raise ConfigError(f"{flag} {path}: no PEM {what.lower()} in it")
    return data


def _load_chain(
    ctx: ssl.SSLContext, cert: str, key: str, cert_flag: str, key_flag: str
) -> tuple[bytes, bytes]:
    """Load a certificate and its key into `ctx`; return both files' bytes."""
    cert_pem = read_pem(cert, cert_flag)
    key_pem = read_pem(key, key_flag, "PRIVATE KEY")
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except _Encrypted:
        raise _encrypted(key_flag, key) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{key_flag} {key} is not the key of {cert_flag} {cert}") from None
        raise ConfigError(f"{cert_flag} {cert} / {key_flag} {key}: unusable ({exc})") from None
    except OSError as exc:  # removed between the read and the load
        raise ConfigError(f"{cert_flag} {cert}: cannot read it ({exc})") from None
    return cert_pem, key_pem


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A listener's TLS: the context (aiohttp, asyncio) and the same files as PEM bytes (grpc
    servers take bytes)."""

    context: ssl.SSLContext
    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None  # clients must present a certificate signed by it

    @classmethod
    def load(
        cls,
        cert_path: str | None,
        key_path: str | None,
        client_ca_path: str | None = None,
        *,
        alpn: tuple[str, ...] = HTTP1,
        flags: tuple[str, str, str] = (
            "--tls-cert-path",
            "--tls-key-path",
            "--tls-client-ca-path",
        ),
    ) -> ServerTls | None:
        """None when no certificate is configured. With `client_ca_path`, clients must present a
        certificate signed by that CA (only that CA: the system store is not trusted for client
        certificates)."""
        cert_flag, key_flag, ca_flag = flags
        if not _pair(cert_path, key_path, cert_flag, key_flag):
            if client_ca_path is not None:
                raise ConfigError(f"{ca_flag} needs {cert_flag} and {key_flag}")
            return None
        assert cert_path is not None and key_path is not None
        ca_pem = None if client_ca_path is None else read_pem(client_ca_path, ca_flag)
        ctx = _context(ssl.Purpose.CLIENT_AUTH, ca_pem, alpn, ca_flag)
        ctx.options |= ssl.OP_NO_RENEGOTIATION
        if ca_pem is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
        cert_pem, key_pem = _load_chain(ctx, cert_path, key_path, cert_flag, key_flag)
        return cls(ctx, cert_pem, key_pem, ca_pem)


def _context(
    purpose: ssl.Purpose, ca_pem: bytes | None, alpn: tuple[str, ...], ca_flag: str
) -> ssl.SSLContext:
    """The standard library's defaults for `purpose`, TLS >= 1.2, trusting only `ca_pem` when
    given (else the system's store)."""
    cadata = None if ca_pem is None else ca_pem.decode("ascii", "replace")
    try:
        ctx = ssl.create_default_context(purpose, cadata=cadata)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{ca_flag}: not a usable CA certificate ({exc})") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(list(alpn))
    return ctx


@dataclass(frozen=True, slots=True)
class WorkerTls:
    """How the gateway connects to `https://` and `grpcs://` workers."""

    http: ssl.SSLContext  # aiohttp's connector (only used for https:// URLs)
    h2: ssl.SSLContext  # the lean gRPC client: ALPN h2 only
    ca_pem: bytes | None  # grpc.aio's root certificates; None: grpc's own bundled roots
    cert_pem: bytes | None  # grpc.aio's client certificate chain
    key_pem: bytes | None

    @classmethod
    def load(cls, cfg: TlsConfig) -> WorkerTls:
        has_cert = _pair(
            cfg.client_cert_path, cfg.client_key_path, "--client-cert-path", "--client-key-path"
        )
        if cfg.ca_cert_paths:
            ca_pem: bytes | None = b"\n".join(
                read_pem(p, "--ca-cert-paths") for p in cfg.ca_cert_paths
            )
        else:
            ca_pem = _system_roots()
        contexts = []
        cert_pem = key_pem = None
        for alpn in (HTTP1, H2):
            trusted = ca_pem if cfg.ca_cert_paths else None
            ctx = _context(ssl.Purpose.SERVER_AUTH, trusted, alpn, "--ca-cert-paths")
            if has_cert:
                assert cfg.client_cert_path is not None and cfg.client_key_path is not None
                cert_pem, key_pem = _load_chain(
                    ctx,
                    cfg.client_cert_path,
                    cfg.client_key_path,
                    "--client-cert-path",
                    "--client-key-path",
                )
            contexts.append(ctx)
        return cls(contexts[0], contexts[1], ca_pem, cert_pem, key_pem)

    @classmethod
    def system(cls) -> WorkerTls:
        """The system's trust store and no client certificate (nothing configured)."""
        return cls.load(TlsConfig())


def _system_roots() -> bytes | None:
    """The system store as one PEM file, so grpc.aio verifies against the same CAs as aiohttp
    (None when there is no such file: grpc then uses its bundled roots)."""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile is None:
        return None
    try:
        return Path(cafile).read_bytes()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class GatewayTls:
    """Everything TLS the gateway needs: its listeners' context (None: plaintext) and its
    workers'."""

    server: ssl.SSLContext | None
    workers: WorkerTls

    @classmethod
    def load(cls, cfg: TlsConfig) -> GatewayTls:
        server = ServerTls.load(cfg.tls_cert_path, cfg.tls_key_path)
        return cls(None if server is None else server.context, WorkerTls.load(cfg))
