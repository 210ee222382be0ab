"""How a store URL is shown (``/healthz``, logs, error messages): scheme, host(s) and port(s) only.

A Redis URL may carry credentials in several places: the userinfo (``user:password@``), the
query (``?password=``, ``?username=``, redis-py reads both), TLS file paths (``ssl_keyfile``,
``ssl_certfile``, ``ssl_ca_certs``) and their ``ssl_password``. Rather than strip each known
form (and miss the next), nothing but the address is ever shown: ``redis://10.0.0.5:6379``,
``redis+cluster://a:7000,b:7001``, ``unix:///run/redis.sock``. Pure text handling: no redis-py.
"""

from __future__ import annotations

from urllib.parse import urlsplit

UNREADABLE = "(a store URL that could not be read)"
NOT_A_URL = "(not a URL: no scheme://)"


def shown_url(url: str) -> str:
    """``url`` as it may be shown to anyone: scheme and address, never a credential (never raises)."""
    scheme, separator, rest = url.partition("://")
    if not separator or not scheme.replace("+", "").isalnum():
        return NOT_A_URL  # perhaps a password in the wrong place: not shown either
    scheme = scheme.lower()
    end = min((rest.find(mark) for mark in "/?#" if mark in rest), default=len(rest))
    netloc = rest[:end].rpartition("@")[2]  # the userinfo (user:password@) is never shown
    if scheme == "unix":
        path = rest[end:].split("?", 1)[0].split("#", 1)[0]
        return f"unix://{path}" if path.startswith("/") else UNREADABLE
    hosts = [_host_port(part) for part in netloc.split(",")]
    if not hosts or None in hosts:
        return f"{scheme}://{UNREADABLE}"
    return f"{scheme}://{','.join(host for host in hosts if host is not None)}"


def _host_port(hostport: str) -> str | None:
    """``host:port`` (``[v6]:port``) as written, or None if it is not one."""
    try:
        parts = urlsplit(f"//{hostport}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"
