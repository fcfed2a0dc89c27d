"""The request flow, built from the config: the runner, the prepare step, the dispatchers.

Which dispatchers exist is decided here once: PD mode (`--pd-disaggregation`) gives HTTP PD and
gRPC PD, each role picking with its own policy (`--prefill-policy`, `--decode-policy`; the main
one by default); otherwise every request goes to one worker per attempt. In IGW mode
(`--enable-igw`) a model may have its own policy (its first worker's `policy` label).
"""

from __future__ import annotations

import random

from smg.clock import Clock
from smg.config import GatewayConfig, model_aliases
from smg.core.retry import RetryPolicy
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.flow.admission import Admission
from smg.flow.inflight import InFlight
from smg.flow.pd_grpc import GrpcPd
from smg.flow.pd_http import HttpPd
from smg.flow.prepare import Preparer
from smg.flow.relay import HttpRelay
from smg.flow.runner import Pairing, Runner, RunnerMetrics
from smg.flow.serve import Flow
from smg.flow.single import SingleWorker
from smg.metrics.router import RouterMetrics
from smg.pipeline.backends.grpc_pool import EnginePool
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.loads import LoadBoard
from smg.pipeline.parser_choice import ParserChoice
from smg.pipeline.policies import CacheAwarePolicy, Policy, make_policy
from smg.pipeline.tokenizer import Tokenizer

# policies that key on the request's text in HTTP mode (cache-aware trees, hashing)
_TEXT_POLICIES = frozenset({"cache_aware", "consistent_hashing", "prefix_hash", "bucket"})


def build_flow(
    cfg: GatewayConfig,
    *,
    backend: HttpBackend,
    engines: EnginePool,
    registry: SnapshotCell[RegistrySnapshot],
    tokenizers: SnapshotCell[dict[str, Tokenizer]],
    loads: SnapshotCell[LoadBoard],
    policy: Policy,
    admission: Admission,
    inflight: InFlight,
    metrics: RunnerMetrics,
    clock: Clock,
    rng: random.Random,
    router_metrics: RouterMetrics | None = None,
) -> Flow:
    timeout_s = cfg.server.request_timeout_secs
    igw = cfg.routing.enable_igw

    def model_policy(name: str) -> Policy:
        """IGW mode: a model's own policy (its first worker's `policy` label)."""
        return make_policy(
            name, cfg.routing, rng, clock.now, loads=loads, hash_misses=cfg.mesh.enable_mesh
        )

    runner = Runner(
        registry=registry,
        policy=policy,
        retry=RetryPolicy.from_config(cfg.retry),
        clock=clock,
        rng=rng,
        metrics=metrics,
        request_timeout_s=timeout_s,
        make_policy=model_policy if igw else None,
    )
    preparer = Preparer(
        tokenizers=tokenizers,
        parsers=ParserChoice(cfg.tokenizer.reasoning_parser, cfg.tokenizer.tool_call_parser),
        # IGW mode: any model's policy may key on the text
        wants_text=igw or bool(_policy_names(cfg) & _TEXT_POLICIES),
        now=clock.now,
    )
    relay = HttpRelay(runner, backend)
    http_pd: HttpPd | None = None
    grpc_pd: GrpcPd | None = None
    pairing = _pairing(cfg, policy, loads, metrics, clock, rng)
    if pairing is not None:
        http_pd = HttpPd(backend=backend, pairing=pairing, rng=rng)
        grpc_pd = GrpcPd(
            runner=runner,
            pairing=pairing,
            engines=engines,
            rng=rng,
            timeout_s=timeout_s,
            prefill_retries=0 if cfg.retry.disable_retries else 1,
        )
    return Flow(
        runner=runner,
        admission=admission,
        inflight=inflight,
        preparer=preparer,
        single=SingleWorker(runner=runner, relay=relay, engines=engines),
        http_pd=http_pd,
        grpc_pd=grpc_pd,
        igw=igw,
        aliases=model_aliases(cfg.routing.model_alias),
        metrics=router_metrics,
    )


def _policy_names(cfg: GatewayConfig) -> set[str]:
    pdc, name = cfg.pd, cfg.routing.policy
    if not pdc.pd_disaggregation:
        return {name}
    return {pdc.prefill_policy or name, pdc.decode_policy or name}


def _pairing(
    cfg: GatewayConfig,
    policy: Policy,
    loads: SnapshotCell[LoadBoard],
    metrics: RunnerMetrics,
    clock: Clock,
    rng: random.Random,
) -> Pairing | None:
    """PD mode's pair picker (None outside PD mode)."""
    pdc = cfg.pd
    if not pdc.pd_disaggregation:
        return None

    def role_policy(name: str | None) -> Policy:
        chosen = name or cfg.routing.policy
        if chosen == cfg.routing.policy and isinstance(policy, CacheAwarePolicy):
            return policy  # share its state (cache-aware trees, KV index)
        # One instance per role otherwise: a round-robin counter shared by both roles moves
        # twice per request, so with two prefills and one decode every request would land on
        # the same prefill.
        return make_policy(
            chosen, cfg.routing, rng, clock.now, loads=loads, hash_misses=cfg.mesh.enable_mesh
        )

    return Pairing(role_policy(pdc.prefill_policy), role_policy(pdc.decode_policy), clock, metrics)
