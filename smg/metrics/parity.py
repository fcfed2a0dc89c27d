"""The Rust gateway's Prometheus series, and which of them smg serves.

`RUST_SERIES` lists every series the Rust gateway (lightseekorg/smg) registers: its name, its type
and its label names, read from its sources (model_gateway/src/observability/metrics.rs and
runtime_metrics.rs, inflight_tracker.rs, middleware/scheduler/metrics.rs, crates/mesh/src/
metrics.rs). `NOT_SERVED` says why smg does not serve one; every other one smg serves with the
same name, type and label names (a few with one more label, in `EXTRA_LABELS`).
tests/integration/test_metrics_parity.py holds a live gateway to this table.

`python -m smg.metrics.parity` prints the table as markdown, with the counts.
"""

from __future__ import annotations

import sys

# name -> (type, label names); a counter's name is its sample name (with `_total`)
RUST_SERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "router_lb_drift_ratio": ("gauge", ("model",)),
    "router_mesh_peer_ack_total": ("counter", ("peer", "status")),
    "router_mesh_peer_connections": ("gauge", ("peer",)),
    "router_mesh_peer_nack_total": ("counter", ("peer",)),
    "router_mesh_peer_reconnects_total": ("counter", ("peer",)),
    "router_mesh_store_cardinality": ("gauge", ("store",)),
    "router_mesh_store_hash": ("gauge", ("store",)),
    "router_mesh_sync_round_duration_seconds": ("histogram", ("peer",)),
    "router_rl_drift_ratio": ("gauge", ("key",)),
    "smg_consistent_hashing_policy_branch_total": ("counter", ("branch",)),
    "smg_db_connections_active": ("gauge", ("storage_type",)),
    "smg_db_items_stored": ("counter", ("storage_type",)),
    "smg_db_operation_duration_seconds": ("histogram", ("operation", "storage_type")),
    "smg_db_operations_total": ("counter", ("operation", "result", "storage_type")),
    "smg_discovery_deregistrations_total": ("counter", ("reason", "source")),
    "smg_discovery_registrations_total": ("counter", ("result", "source")),
    "smg_discovery_sync_duration_seconds": ("histogram", ("source",)),
    "smg_discovery_workers_discovered": ("gauge", ("source",)),
    "smg_engine_cache_hit_rate": ("gauge", ("dp_rank", "model", "worker")),
    "smg_engine_gen_throughput": ("gauge", ("dp_rank", "model", "worker")),
    "smg_engine_pd_decode_queue_reqs": ("gauge", ("dp_rank", "role", "worker")),
    "smg_engine_pd_kv_transfer_latency_ms": ("gauge", ("dp_rank", "role", "worker")),
    "smg_engine_pd_kv_transfer_speed_gb_s": ("gauge", ("dp_rank", "role", "worker")),
    "smg_engine_pd_prefill_queue_reqs": ("gauge", ("dp_rank", "role", "worker")),
    "smg_engine_running_requests": ("gauge", ("dp_rank", "model", "worker")),
    "smg_engine_token_usage": ("gauge", ("dp_rank", "model", "worker")),
    "smg_engine_waiting_requests": ("gauge", ("dp_rank", "model", "worker")),
    "smg_http_connections_active": ("gauge", ()),
    "smg_http_inflight_request_age_count": ("gauge", ("gt", "le")),
    "smg_http_rate_limit_total": ("counter", ("result",)),
    "smg_http_request_duration_seconds": ("histogram", ("method", "path")),
    "smg_http_requests_total": ("counter", ("method", "path")),
    "smg_http_responses_total": ("counter", ("error_code", "path", "status_code")),
    "smg_kv_event_subscription_failures_total": ("counter", ("reason", "worker")),
    "smg_manual_policy_branch_total": ("counter", ("branch",)),
    "smg_manual_policy_cache_entries": ("gauge", ()),
    "smg_mcp_servers_active": ("gauge", ()),
    "smg_mcp_tool_calls_total": ("counter", ("model", "result", "tool_name")),
    "smg_mcp_tool_duration_seconds": ("histogram", ("model", "tool_name")),
    "smg_mcp_tool_iterations_total": ("counter", ("model",)),
    "smg_mm_shm_write_failures_total": ("counter", ("runtime",)),
    "smg_mm_tensor_bytes_total": ("counter", ("path", "runtime")),
    "smg_mm_tensors_total": ("counter", ("path", "runtime")),
    "smg_pd_bootstrap_failures_total": ("counter", ()),
    "smg_pd_kv_connector_mode_total": ("counter", ("mode",)),
    "smg_pd_kv_transfer_duration_seconds": ("histogram", ("backend_type", "model", "runtime")),
    "smg_pd_kv_transfer_failures_total": ("counter", ()),
    "smg_pd_prefill_duration_seconds": ("histogram", ("backend_type", "model", "runtime")),
    "smg_pd_ttft_seconds": ("histogram", ("backend_type", "model", "runtime")),
    "smg_prefix_hash_policy_branch_total": ("counter", ("branch",)),
    "smg_router_generation_duration_seconds": (
        "histogram",
        ("backend_type", "endpoint", "model", "router_type"),
    ),
    "smg_router_request_duration_seconds": (
        "histogram",
        ("backend_type", "connection_mode", "endpoint", "model", "router_type"),
    ),
    "smg_router_request_errors_total": (
        "counter",
        ("backend_type", "connection_mode", "endpoint", "error_type", "model", "router_type"),
    ),
    "smg_router_requests_total": (
        "counter",
        ("backend_type", "connection_mode", "endpoint", "model", "router_type", "streaming"),
    ),
    "smg_router_stage_duration_seconds": ("histogram", ("router_type", "stage")),
    "smg_router_tokens_total": (
        "counter",
        ("backend_type", "endpoint", "model", "router_type", "token_type"),
    ),
    "smg_router_tpot_seconds": ("histogram", ("backend_type", "endpoint", "model", "router_type")),
    "smg_router_ttft_seconds": ("histogram", ("backend_type", "endpoint", "model", "router_type")),
    "smg_router_upstream_responses_total": (
        "counter",
        ("error_code", "router_type", "status_code"),
    ),
    "smg_scheduler_admit_total": ("counter", ("class", "outcome")),
    "smg_scheduler_clamp_total": ("counter", ("effective_class", "requested_class", "tenant")),
    "smg_scheduler_class_capacity_pressure": ("gauge", ("class",)),
    "smg_scheduler_inflight": ("gauge", ("class",)),
    "smg_scheduler_preemption_total": ("counter", ("by_class", "victim_class")),
    "smg_scheduler_queue_depth": ("gauge", ("class",)),
    "smg_scheduler_queue_size_limit": ("gauge", ("class",)),
    "smg_scheduler_queue_wait_seconds": ("histogram", ("class",)),
    "smg_scheduler_starvation_promotion_total": ("counter", ("class",)),
    "smg_scheduler_unknown_priority_value_total": ("counter", ("tenant",)),
    "smg_scheduler_utilization": ("gauge", ()),
    "smg_tokio_alive_tasks": ("gauge", ()),
    "smg_tokio_event_loop_delay_seconds": ("histogram", ()),
    "smg_tokio_event_loop_stalls_total": ("counter", ()),
    "smg_tokio_global_queue_depth": ("gauge", ()),
    "smg_tokio_worker_busy_ratio": ("gauge", ("worker",)),
    "smg_tokio_worker_parks_total": ("counter", ("worker",)),
    "smg_tokio_workers": ("gauge", ()),
    "smg_worker_cb_consecutive_failures": ("gauge", ("worker",)),
    "smg_worker_cb_consecutive_successes": ("gauge", ("worker",)),
    "smg_worker_cb_outcomes_total": ("counter", ("outcome", "worker")),
    "smg_worker_cb_state": ("gauge", ("worker",)),
    "smg_worker_cb_transitions_total": ("counter", ("from", "to", "worker")),
    "smg_worker_connections_active": ("gauge", ("connection_mode", "worker_type")),
    "smg_worker_errors_total": ("counter", ("connection_mode", "error_type", "worker_type")),
    "smg_worker_health": ("gauge", ("worker",)),
    "smg_worker_health_checks_total": ("counter", ("result", "worker_type")),
    "smg_worker_pool_size": ("gauge", ("connection_mode", "model", "worker_type")),
    "smg_worker_requests_active": ("gauge", ("worker",)),
    "smg_worker_retries_exhausted_total": ("counter", ("endpoint", "worker_type")),
    "smg_worker_retries_total": ("counter", ("endpoint", "worker_type")),
    "smg_worker_retry_backoff_seconds": ("histogram", ("attempt",)),
    "smg_worker_routing_keys_active": ("gauge", ("worker",)),
    "smg_worker_selection_total": (
        "counter",
        ("connection_mode", "model", "policy", "worker_type"),
    ),
}

TOKIO = "Tokio runtime internals; smg runs on asyncio (its loop lag: bench/loop_lag.py)"
SCHEDULER = (
    "no priority scheduler in smg: one FIFO admission queue (smg_http_requests_queued, "
    "smg_http_requests_in_flight, smg_http_rate_limit_total)"
)
MM = "no multimodal tensors in smg (images are passed to HTTP workers as they are)"

NOT_SERVED: dict[str, str] = {
    "smg_tokio_alive_tasks": TOKIO,
    "smg_tokio_event_loop_delay_seconds": TOKIO,
    "smg_tokio_event_loop_stalls_total": TOKIO,
    "smg_tokio_global_queue_depth": TOKIO,
    "smg_tokio_worker_busy_ratio": TOKIO,
    "smg_tokio_worker_parks_total": TOKIO,
    "smg_tokio_workers": TOKIO,
    "smg_scheduler_admit_total": SCHEDULER,
    "smg_scheduler_clamp_total": SCHEDULER,
    "smg_scheduler_class_capacity_pressure": SCHEDULER,
    "smg_scheduler_inflight": SCHEDULER,
    "smg_scheduler_preemption_total": SCHEDULER,
    "smg_scheduler_queue_depth": SCHEDULER,
    "smg_scheduler_queue_size_limit": SCHEDULER,
    "smg_scheduler_queue_wait_seconds": SCHEDULER,
    "smg_scheduler_starvation_promotion_total": SCHEDULER,
    "smg_scheduler_unknown_priority_value_total": SCHEDULER,
    "smg_scheduler_utilization": SCHEDULER,
    "smg_mm_shm_write_failures_total": MM,
    "smg_mm_tensor_bytes_total": MM,
    "smg_mm_tensors_total": MM,
    "smg_engine_cache_hit_rate": "the engines' load reports smg reads carry no cache hit rate",
    "smg_engine_pd_decode_queue_reqs": "the load poll keeps no per-rank PD (disagg) section",
    "smg_engine_pd_kv_transfer_latency_ms": "the load poll keeps no per-rank PD (disagg) section",
    "smg_engine_pd_kv_transfer_speed_gb_s": "the load poll keeps no per-rank PD (disagg) section",
    "smg_engine_pd_prefill_queue_reqs": "the load poll keeps no per-rank PD (disagg) section",
    "smg_kv_event_subscription_failures_total": "not yet: KV-event stream failures are logged only",
    "smg_prefix_hash_policy_branch_total": "not yet: the prefix-hash policy's branches are not "
    "counted",
    "smg_db_connections_active": "not yet: the storage backends' pools are not counted",
    "router_mesh_peer_ack_total": "the Rust mesh's gRPC sync-stream acks; smg's SWIM/CRDT mesh "
    "has none (smg_mesh_dropped_messages, smg_mesh_rejected_writes instead)",
    "router_mesh_peer_nack_total": "the Rust mesh's gRPC sync-stream nacks; smg's mesh has none",
    "router_mesh_peer_reconnects_total": "smg's mesh keeps no connections (SWIM over UDP, "
    "smg_mesh_members)",
    "router_mesh_sync_round_duration_seconds": "smg's mesh has no sync rounds (deltas are pushed "
    "as they are written)",
    "router_rl_drift_ratio": "the Rust mesh's rate-limit drift; smg's rate limits are per node",
    "router_lb_drift_ratio": "the Rust mesh's load-balance drift; not measured by smg",
}

# series smg labels with more than the Rust gateway's names (bounded values): name -> extra
EXTRA_LABELS: dict[str, tuple[str, ...]] = {
    "smg_worker_selection_total": ("worker",),
    "smg_worker_retries_total": ("worker",),
    "smg_mcp_tool_calls_total": ("server",),
    "smg_mcp_tool_duration_seconds": ("server",),
}


# served with a difference worth knowing: name -> what differs
NOTES: dict[str, str] = {
    "smg_consistent_hashing_policy_branch_total": "no target_worker_hit/miss branches: smg "
    "has no target-worker header",
    "smg_manual_policy_branch_total": "the launch policy's (an IGW model's own policy is not "
    "counted)",
    "smg_pd_prefill_duration_seconds": "gRPC PD with vLLM engines (SGLang's legs run at once)",
    "smg_pd_kv_transfer_duration_seconds": "gRPC PD with vLLM engines",
    "smg_pd_kv_connector_mode_total": "gRPC PD with vLLM engines: mode nixl",
    "smg_db_items_stored": "its sample is smg_db_items_stored_total (prometheus_client ends "
    "every counter sample in _total)",
    "smg_engine_running_requests": 'dp_rank is "all": the load poll sums the DP ranks',
    "smg_discovery_registrations_total": "Kubernetes pods (source kubernetes); no file provider",
    "smg_worker_retry_backoff_seconds": 'attempt above 5 is "6+"',
}


def served() -> dict[str, tuple[str, tuple[str, ...]]]:
    return {n: v for n, v in RUST_SERIES.items() if n not in NOT_SERVED}


def markdown() -> str:
    rows = ["| Rust series | type | labels | smg |", "|---|---|---|---|"]
    for name, (kind, labels) in sorted(RUST_SERIES.items()):
        status = NOT_SERVED.get(name)
        if status is None:
            extra = EXTRA_LABELS.get(name)
            status = "served" + (f" (+ {', '.join(extra)})" if extra else "")
            if name in NOTES:
                status += f"; {NOTES[name]}"
        elif not status.startswith("not yet"):
            status = "n/a: " + status
        rows.append(f"| `{name}` | {kind} | {', '.join(labels) or '-'} | {status} |")
    n, na = len(served()), len(NOT_SERVED)
    later = sum(1 for v in NOT_SERVED.values() if v.startswith("not yet"))
    head = (
        f"{len(RUST_SERIES)} Rust series: {n} served, {na} not served ({na - later} "
        f"n/a in smg, {later} not yet)."
    )
    return head + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
