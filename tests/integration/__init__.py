"""Real processes on loopback: `smg sim` workers behind an `smg launch` gateway."""
