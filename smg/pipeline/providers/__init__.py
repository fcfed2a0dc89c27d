"""External providers as workers: the pure translation cores (no IO), one module per vendor.

A provider worker (`runtime_type: external` with a `provider`, or `--backend openai|anthropic`)
is reached over HTTP like any worker; what differs is only what goes on the wire. Each vendor's
module implements `base.Provider`: an OpenAI chat completions request in, the vendor's request
out; the vendor's answer (whole or streamed) in, an OpenAI chat completion (or OpenAI error) out.
The transport shell (smg.pipeline.backends.http and the relay) moves the bytes.
"""
