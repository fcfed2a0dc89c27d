"""Tools shared by the XML-format tests: one schema with every parameter type."""

from __future__ import annotations

TRIP_PROPERTIES = {
    "city": {"type": "string"},
    "zip": {"type": "string"},
    "nights": {"type": "integer"},
    "budget": {"type": "number"},
    "refundable": {"type": "boolean"},
    "prefs": {"type": "object"},
    "stops": {"type": "array"},
    "note": {"type": ["string", "null"]},
    "rooms": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "plan_trip",
            "parameters": {"type": "object", "properties": TRIP_PROPERTIES},
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}},
]

NESTED = {"seat": {"side": "window", "rows": [3, 4]}, "meal": None, "ok": True}
STOPS = ["Bergen", {"name": "Flåm", "hours": 2.5}, []]
