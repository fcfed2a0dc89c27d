"""The request flow: one path from a parsed request to the client's answer, for every surface.

An API edge (smg/api/) reads and validates a request in its own shape (OpenAI chat, completions,
embeddings, SGLang /generate; later Anthropic Messages and Responses) and turns it into one typed
value, `Request` (request.py). It then calls `Flow.serve` (serve.py) with that value, the
renderer of its surface and the client connection, and returns what the flow returns. Everything
between is here, once:

    edge ─Request─▶ admit ─▶ prepare ─▶ select/plan ─▶ dispatch ─▶ output events ─▶ render ─▶ client
                    permit,   template,   policy,        transport    engine events,
                    in-flight tokenize,   PD pairing     adapters     or raw chunks
                    table     or pass-                                (byte relay)
                              through

* **admit** (admission.py, inflight.py): a permit from the bounded admission queue, held until
  the answer has ended; the request's task in the in-flight table the drain waits on.
* **prepare** (prepare.py): for a model served by gRPC engines ("token mode"), the chat template
  and the tokenizer turn the request into token ids, sampling params and an `OutputSpec`; for a
  model served by HTTP workers only ("pass-through"), nothing is parsed beyond the edge: the
  client's bytes go to the worker (with the gateway's engine id in place of the client's).
* **select/plan** (runner.py, smg.pipeline.pd): the policy picks the dispatch plan of each
  attempt: one worker, or a prefill/decode pair in PD mode (later: an external provider).
* **dispatch** (single.py, pd_http.py, pd_grpc.py): a plan runs through the transport adapters
  of smg.pipeline.backends: an HTTP worker, a gRPC engine, a PD pair over HTTP (SGLang's
  bootstrap fields), a PD pair over gRPC (SGLang or vLLM style). Which dispatcher serves a
  request is one decision in `Flow.serve`: (token mode?, PD mode?).
* **output and render** (render.py, relay.py): an engine's answer is a stream of typed events
  (`TokenDelta`, `Finished`, normalised across runtimes by the adapter), turned into the
  surface's frames by the `Renderer` the edge passed in (`OutputShaper` for OpenAI chat and
  completions, `GenerateShaper` for SGLang's /generate); a new surface is a new renderer, not a
  new flow. An HTTP worker already speaks the client's protocol, so its answer is relayed as
  bytes (its "events" are raw chunks: never parsed and re-serialised).

Applied once, here, for every plan and every surface: admission, the one deadline per request
(retries, backoffs and PD legs spend one budget), retries before the client saw a byte (runner),
breaker reports and in-flight counts (`settle`), selection metrics, the idle limit and the size
cap of upstream answers (relay.py, through the HTTP adapter's watch), and the rule that a
client's departure is never a worker's failure (a write that finds the client gone, or the
handler's cancellation, settles the attempt with outcome None).

Layering (checked by the import contracts in pyproject.toml): smg.api (edges) → smg.flow →
smg.actors (the outcome messages to worker actors) → smg.pipeline stages and backends → smg.core
(published snapshots, state machines) → smg.config, smg.errors, smg.clock. Nothing here imports
smg.api or smg.app; the composition root (smg.app) builds the `Flow` from the config.

Hot path: per request the flow builds one `Request` (a NamedTuple: 0.3 µs, where a frozen
slotted dataclass of the same twelve fields costs 1.2 µs), per streamed batch it calls the
renderer once per event and writes once; no task, timer or frozen dataclass is added per
request or per chunk.
"""
