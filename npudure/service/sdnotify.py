"""systemd's notify protocol, without a dependency: READY=1 when serving, WATCHDOG=1 from the event loop.

Outside systemd (no $NOTIFY_SOCKET) every call is a no-op. The watchdog is pinged by a task on the
asyncio loop itself, so a wedged loop misses its pings and systemd restarts the service (WatchdogSec=).
"""

from __future__ import annotations

import asyncio
import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` (e.g. "READY=1") to the service manager; False when not run by systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec= when the watchdog is on for this very process, else None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1e6 / 2


async def watchdog() -> None:
    """Ping the watchdog from this event loop until cancelled (returns at once when it is off)."""
    interval = watchdog_interval_s()
    if interval is None:
        return
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval)
