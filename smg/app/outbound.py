"""The gateway's outbound side, composed from the config: which workers start registered, where
workers may be (the address policy, checked before anything starts), and the HTTP backend with
its credentials, deadline, connect timeout, response cap and idle limit, over the HTTP client
session and the data path's lean HTTP/1.1 pool."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

import aiohttp

from smg.actors.messages import AddWorker
from smg.actors.registry import normalize_url
from smg.config import ConfigError, GatewayConfig
from smg.core.idle import IdleSweeper
from smg.core.worker_urls import AddressPolicy, InvalidWorkerUrl
from smg.pipeline import pd
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.h1_pool import H1Client
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.providers import PROVIDERS


def startup_workers(cfg: GatewayConfig) -> list[AddWorker]:
    """The workers named on the command line; in PD mode also the prefill and decode ones.
    They carry no api_key of their own: requests to them send `--worker-api-key` (never the
    clients' `--api-key`)."""
    backend = cfg.workers.backend
    if backend in PROVIDERS:  # an external provider's API base: translated, keyed, listed
        out = [
            AddWorker(url, runtime_type="external", provider=backend)
            for url in cfg.workers.worker_urls
        ]
    else:
        out = [AddWorker(url) for url in cfg.workers.worker_urls]
    if cfg.pd.pd_disaggregation:
        for entry in cfg.pd.prefill:
            url, port = pd.parse_prefill(entry)
            out.append(AddWorker(url, worker_type=pd.PREFILL, bootstrap_port=port))
        out += [AddWorker(url, worker_type=pd.DECODE) for url in cfg.pd.decode]
    return out


def address_guard(cfg: GatewayConfig) -> AddressGuard:
    """The worker address policy of `--worker-url-allowlist/--worker-url-denylist`; a malformed
    CIDR is a `ConfigError`. Every command-line worker is checked here without DNS (its shape,
    a denied name or literal address): a refused one is a `ConfigError` too."""
    up = cfg.upstream
    try:
        guard = AddressGuard(AddressPolicy(up.worker_url_allowlist, up.worker_url_denylist))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for msg in startup_workers(cfg):
        try:
            guard.policy.check(normalize_url(msg.url))
        except InvalidWorkerUrl as exc:
            raise _refused(msg.url, exc) from None
    return guard


async def check_startup_names(cfg: GatewayConfig, guard: AddressGuard) -> None:
    """Resolve the command-line workers' host names: one resolving to a denied address is a
    `ConfigError` (the gateway does not start)."""
    for msg in startup_workers(cfg):
        try:
            await guard.check(normalize_url(msg.url))
        except InvalidWorkerUrl as exc:
            raise _refused(msg.url, exc) from None


def _refused(url: str, exc: InvalidWorkerUrl) -> ConfigError:
    return ConfigError(f"worker {url!r}: {exc} (see --worker-url-allowlist/--worker-url-denylist)")


def idle_sweeper(cfg: GatewayConfig) -> IdleSweeper | None:
    idle_s = cfg.upstream.upstream_idle_timeout_secs
    return IdleSweeper(idle_s) if idle_s > 0 else None


def http_backend(
    session: aiohttp.ClientSession,
    cfg: GatewayConfig,
    idle: IdleSweeper | None,
    client: H1Client | None = None,
) -> HttpBackend:
    up = cfg.upstream
    return HttpBackend(
        session,
        cfg.server.request_timeout_secs,
        worker_api_key=up.worker_api_key,
        connect_timeout_s=up.upstream_connect_timeout_secs,
        max_response_bytes=up.max_upstream_response_bytes,
        idle=idle,
        provider_byok=up.provider_byok,
        gateway_keys=gateway_keys(cfg),
        client=client,
    )


def gateway_keys(cfg: GatewayConfig) -> frozenset[str]:
    """The gateway's own data-plane keys: bring-your-own-key never forwards one of them."""
    keys = {cfg.server.api_key} if cfg.server.api_key else set()
    keys |= {entry.partition(":")[2] for entry in cfg.auth.tenant_api_keys}
    return frozenset(keys)


@contextlib.asynccontextmanager
async def worker_session(
    tls: ssl.SSLContext, guard: AddressGuard
) -> AsyncIterator[aiohttp.ClientSession]:
    """The HTTP client session to the workers: `tls` for https:// ones, `guard`'s address policy
    at every connect."""
    connector = aiohttp.TCPConnector(
        limit=0,
        ttl_dns_cache=300,
        force_close=False,
        ssl=tls,
        socket_factory=guard.socket_factory,  # every connect: the address policy
    )
    async with aiohttp.ClientSession(
        connector=connector,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        auto_decompress=False,
    ) as session:
        yield session


@contextlib.asynccontextmanager
async def data_client(tls: ssl.SSLContext, guard: AddressGuard) -> AsyncIterator[H1Client]:
    """The lean HTTP/1.1 pool of the data path's POSTs to HTTP workers: the same address
    policy and TLS context as the session."""
    client = H1Client(guard, tls)
    try:
        yield client
    finally:
        client.close()
