"""Cluster membership: a sans-IO SWIM + Lifeguard core (no sockets, no clock, no asyncio)."""
