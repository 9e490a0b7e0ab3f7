"""``host:port`` addresses as the scheduler's config writes them: the host as an IP when it is one."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def split(address: str) -> tuple[IPAddress | None, str, str]:
    """``(ip, host, port)`` of ``host:port`` (IPv6 in brackets); ``ip`` is None when the host is a name.

    The route resolves names and the reload command keeps them, so both start from this one parse.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host), host, port
    except ValueError:
        return None, host, port
