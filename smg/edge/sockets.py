"""What the kernel still holds of a socket's output (Linux)."""

from __future__ import annotations

import fcntl
import sys
import termios


def unsent_bytes(fd: int) -> int:
    """Bytes in the socket's send queue the peer has not acknowledged (Linux SIOCOUTQ); 0 where
    the kernel does not say."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"), sys.byteorder)
    except OSError:
        return 0
