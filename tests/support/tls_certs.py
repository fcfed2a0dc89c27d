"""Throwaway certificates for TLS tests, made at test time with `trustme` and written as PEM files.

`make_pki(folder)` gives a test CA with a server certificate for 127.0.0.1 and localhost, a client
certificate (the gateway's, for mutual TLS), a server certificate for another host name, and a
second CA that signed nothing the servers use. Plus an in-memory handshake between two contexts,
so context rules are tested without sockets.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

from smg.config import TlsConfig
from smg.tls import H2, ServerTls, WorkerTls


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: trustme.CA
    ca_path: Path
    server: Pair  # 127.0.0.1 and localhost, signed by `ca`
    client: Pair  # the gateway's client certificate, signed by `ca`
    wrong_host: Pair  # signed by `ca`, for elsewhere.example only
    other_ca_path: Path  # a CA that signed none of the above
    other_client: Pair  # a client certificate signed by the other CA

    def client_context(self, *, trust: bool = True, present_cert: bool = True) -> ssl.SSLContext:
        """What a client of a server holding `server` uses (verifying it when `trust`)."""
        ctx = ssl.create_default_context()
        if trust:
            self.ca.configure_trust(ctx)
        if present_cert:
            ctx.load_cert_chain(self.client.cert, self.client.key)
        return ctx

    def gateway_flags(self, *, ca: Path | None = None, cert: bool = True) -> dict[str, Any]:
        """`smg launch` options towards TLS workers: trust `ca` (default: the test CA), present
        `client` (unless `cert` is False)."""
        flags: dict[str, Any] = {"ca_cert_paths": [ca or self.ca_path]}
        if cert:
            flags |= {"client_cert_path": self.client.cert, "client_key_path": self.client.key}
        return flags

    def h2_server(self, alpn: tuple[str, ...] = H2) -> ssl.SSLContext:
        """A gRPC server's context holding `server` (ALPN h2 unless told otherwise)."""
        tls = ServerTls.load(str(self.server.cert), str(self.server.key), alpn=alpn)
        assert tls is not None
        return tls.context

    def worker_tls(self, *, ca: Path | None = None, cert: bool = True) -> WorkerTls:
        """The gateway's side: trusting `ca` (default: the test CA), presenting `client`."""
        return WorkerTls.load(
            TlsConfig(
                ca_cert_paths=(str(ca or self.ca_path),),
                client_cert_path=str(self.client.cert) if cert else None,
                client_key_path=str(self.client.key) if cert else None,
            )
        )


def _write(cert: trustme.LeafCert, folder: Path, name: str) -> Pair:
    pair = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    pair.cert.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(pair.key))
    return pair


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    other.cert_pem.write_to_path(str(folder / "other-ca.pem"))
    return Pki(
        ca=ca,
        ca_path=folder / "ca.pem",
        server=_write(ca.issue_cert("127.0.0.1", "localhost"), folder, "server"),
        client=_write(ca.issue_cert("smg-gateway"), folder, "client"),
        wrong_host=_write(ca.issue_cert("elsewhere.example"), folder, "wrong-host"),
        other_ca_path=folder / "other-ca.pem",
        other_client=_write(other.issue_cert("smg-gateway"), folder, "other-client"),
    )


def handshake(
    client: ssl.SSLContext, server: ssl.SSLContext, server_hostname: str = "127.0.0.1"
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake between two contexts over memory buffers, then one byte each way (so a
    server's late refusal of a client certificate, as TLS 1.3 sends it, surfaces). Raises the
    `ssl.SSLError` of whichever side refused."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for side, obj in (("c", c), ("s", s)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    else:
        raise AssertionError("the handshake did not finish")
    c.write(b"?")
    s_in.write(c_out.read())
    assert s.read(1) == b"?"
    s.write(b"!")
    c_in.write(s_out.read())
    assert c.read(1) == b"!"
    return c, s
