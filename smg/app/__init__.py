"""The composition root: the only place that wires the gateway together (see gateway.py)."""
