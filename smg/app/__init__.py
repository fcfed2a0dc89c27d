"""The composition root: the only place that wires the gateway together.

`gateway.py` builds the config-derived objects and owns the lifespan (`Gateway.run`, in named
steps); `actors.py` starts the long-lived actors and passes their events on; `flow.py` builds
the request flow (runner, prepare step, dispatchers) from the config; `outbound.py` the
gateway's side towards its workers (start-up workers, the address policy, the HTTP backend).
The API edges (smg.api), the flow (smg.flow) and the actors (smg.actors) receive what they need
from here and never build each other.
"""
