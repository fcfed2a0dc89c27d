"""smg: an LLM model gateway."""

__version__ = "0.1.0"
