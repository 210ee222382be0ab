"""A tiny HTTP/1.1 file server for the spectator page, on asyncio streams (no framework).

Only GET is served (anything else: 405), one request per connection (``Connection: close``),
from a fixed table built at start-up: ``/`` and ``/watch/CODE`` give the page, ``/static/...``
its files; every other path is 404. A file name never reaches the file system, so no path can
escape the folder. Every response carries the security headers: a Content-Security-Policy that
allows this origin's scripts and styles and a WebSocket to the game port only, ``nosniff``, no
framing, no referrer.

The request head is parsed by h11 (the maintained HTTP/1.1 parser: request line and header
grammar, bare-LF lines, one ``Host``); on top of it only HTTP/1.0 and 1.1 are answered and the
``Host`` must be a host name or an IP literal with an optional port (``host_of``). The port's
defences (docs/reliability.md, "The spectator page's port"): a cap on connections in all and per
address, idle connections evicted first when the slots run out (server/web/slots.py), and a
deadline for the whole request head. Behind a trusted proxy (server/proxy.py) a connection is
counted under the client its PROXY header names.

The page learns the game server's WebSocket URL from a ``<meta>`` tag filled in per request:
the host name the browser used (from ``Host``, checked) with the game port, ``ws://`` or
``wss://`` as the game port speaks, unless ``public_ws_url`` names it (behind a proxy; the
``Host`` is then never echoed).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import ipaddress
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h11

from server.limits import address_key
from server.proxy import ProxyHeaderRefused, TrustedProxies, log_refused, read_header
from server.web.api import DailyApi
from server.web.slots import Refusal, Slots
from shared.protocol import is_room_code

log = logging.getLogger("plot.web")

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
PAGE_TEMPLATE = HERE / "page.html"
WS_URL_SLOT = "__PLOT_WS_URL__"

MAX_HEAD_BYTES = 8192  # request line + headers; the page sends nothing bigger
WRITE_TIMEOUT_S = 10.0
REFUSAL_READ_S = 0.5  # a refused connection's head is awaited this long, so the refusal is read
MAX_REFUSING = 64  # refused connections awaiting their head at once; past it, closed unanswered
MAX_HOST_BYTES = 255  # a DNS name is at most 253 characters; a bracketed IPv6 literal and a port fit too

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
PLAIN = "text/plain; charset=utf-8"
JSON_TYPE = "application/json"
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")  # RFC 1123
HOST_PORT = re.compile(r"^(.+?)(?::([0-9]{1,5}))?$")


@dataclass
class WebConfig:
    host: str = "127.0.0.1"
    port: int = 8766  # 0: any free port (tests)
    # The WebSocket URL the page connects to when the browser cannot reach the game port under the
    # host name it used for the page (a reverse proxy, say): e.g. wss://race.example.org/
    public_ws_url: str | None = None
    reuse_port: bool = False  # SO_REUSEPORT: several processes serve the page (plot-server --workers)
    max_clients: int = 256  # open connections at once; when all are taken an idle one is evicted
    conns_per_address: int = 32  # open connections per address (0: no cap); past it: 429
    head_timeout_s: float = 2.5  # the whole request head must arrive within this; else 408
    # Balancers whose PROXY header names the client (server/proxy.py); another's header is refused.
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str


def load_static(folder: Path = STATIC_DIR) -> dict[str, StaticFile]:
    """URL path -> file, for every file under ``folder`` (read once: the set never changes)."""
    files: dict[str, StaticFile] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            url = "/static/" + path.relative_to(folder).as_posix()
            files[url] = StaticFile(path.read_bytes(), CONTENT_TYPES.get(path.suffix, PLAIN))
    return files


def origin_of(ws_url: str) -> str:
    """``wss://host:port/path`` -> ``wss://host:port``: what the CSP's connect-src allows."""
    parts = urlsplit(ws_url)
    return f"{parts.scheme}://{parts.netloc}"


def content_security_policy(ws_url: str | None) -> str:
    connect = origin_of(ws_url) if ws_url else "'none'"
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def host_of(host_header: str) -> str | None:
    """The host part of a valid ``Host`` value, else None: a DNS name (RFC 1123 labels, at most
    253 characters, a trailing dot allowed), an IPv4 address or a bracketed IPv6 address, then
    an optional port from 1 to 65535; at most MAX_HOST_BYTES in all."""
    if not host_header or len(host_header) > MAX_HOST_BYTES:
        return None
    if host_header.startswith("["):
        literal, sep, rest = host_header[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and _valid_port(rest[1:]))):
            return None
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return None
        return f"[{literal}]"
    match = HOST_PORT.match(host_header)
    if match is None or (match.group(2) is None and ":" in host_header):
        return None
    host, port = match.group(1), match.group(2)
    if port is not None and not _valid_port(port):
        return None
    name = host.removesuffix(".")
    labels = name.split(".")
    if len(name) > 253 or not all(HOST_LABEL.match(label) for label in labels):
        return None
    if labels[-1].isdigit():  # numeric last label: it must be a whole IPv4 address
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return None
    return host


def _valid_port(port: str) -> bool:
    return port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535


def check_public_ws_url(url: str) -> str:
    """A ``ws://`` or ``wss://`` URL with a host, else ValueError saying why."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"not a WebSocket URL: {url!r} (expected ws://HOST:PORT/ or wss://HOST/)")
    if any(ch in url for ch in "\"'<> \r\n"):
        raise ValueError(f"unexpected characters in the WebSocket URL {url!r}")
    return url


async def read_request(reader: asyncio.StreamReader, before: bytes = b"") -> h11.Request | None:
    """The request head (``before``: its first bytes, read already), parsed as it arrives; None
    if the client hung up first. h11 raises RemoteProtocolError on a malformed head, and on one
    past MAX_HEAD_BYTES (hint 431)."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    if before:
        parser.receive_data(before)  # (b"" would mean the end of the stream to h11)
    while True:
        event = parser.next_event()
        if isinstance(event, h11.Request):
            return event
        if event is not h11.NEED_DATA:
            return None  # ConnectionClosed: EOF before a whole head
        data = await reader.read(4096)
        parser.receive_data(data)  # b"": the end of the stream


class WebServer:
    """``await start()`` ... ``await stop()``. ``game_port`` is asked per request, so the web
    server may start before the game server knows its port (port 0)."""

    def __init__(
        self,
        config: WebConfig,
        *,
        game_port: Callable[[], int],
        game_tls: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        api: DailyApi | None = None,
    ) -> None:
        self.config = config
        self.api = api  # the daily deal's JSON API (server/web/api.py), when the server has a store
        self._game_port = game_port
        self._game_scheme = "wss" if game_tls else "ws"
        self._ssl = ssl_context
        self._static = load_static()
        self._page = PAGE_TEMPLATE.read_text(encoding="utf-8")
        self._server: asyncio.Server | None = None
        self._slots = Slots(config.max_clients, config.conns_per_address)
        self._refusing = 0
        if config.public_ws_url is not None:
            check_public_ws_url(config.public_ws_url)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_client,
            self.config.host,
            self.config.port,
            limit=MAX_HEAD_BYTES,
            ssl=self._ssl,
            reuse_port=self.config.reuse_port or None,
        )
        log.info("web_started", extra={"fields": {"host": self.config.host, "port": self.port}})

    @property
    def port(self) -> int:
        assert self._server is not None
        for sock in self._server.sockets:
            return int(sock.getsockname()[1])
        raise RuntimeError("the web server is not listening")

    @property
    def scheme(self) -> str:
        return "https" if self._ssl is not None else "http"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    # ---------------------------------------------------------------- one connection

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        # A trusted proxy's connection is counted per address once its PROXY header names the client.
        address = None if self.config.trusted_proxies.trusts(peer) else address_key(peer)
        slot = self._slots.admit(address, writer.transport.abort)
        if slot == "address" or slot == "full":
            await self._refuse(slot, address or "proxy", reader, writer)
            return
        try:
            try:
                async with asyncio.timeout(self.config.head_timeout_s):
                    client, before = await read_header(reader, peer, self.config.trusted_proxies)
                    if not self._slots.counted(slot):  # a trusted proxy's: counted as the client it names
                        address = address_key(client)
                        if not self._slots.place(slot, address):
                            self._slots.release(slot)
                            await self._refuse("address", address, reader, writer)
                            return
                    request = await read_request(reader, before)
            except TimeoutError:
                timeout = self.config.head_timeout_s
                response = self._error(408, f"the request head did not arrive within {timeout:g} s\n")
            except h11.RemoteProtocolError as exc:
                status = 431 if exc.error_status_hint == 431 else 400
                response = self._error(status, f"malformed request: {exc}\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client went away: nothing to answer
            except ProxyHeaderRefused as exc:
                log_refused(exc, peer)
                return  # closed unanswered
            else:
                if request is None:
                    return  # it hung up before a whole head
                self._slots.busy(slot)
                response = await self._api_response(request) or self.respond(request)
            writer.write(response)
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        finally:
            self._slots.release(slot)
            writer.close()
            with contextlib.suppress(Exception):  # the peer may be gone already; nothing to do about it
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _refuse(
        self, why: Refusal, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """429 (the address holds its cap) or 503 (every slot is answering a request). The answer
        waits up to REFUSAL_READ_S for the request head, since closing on an unread request resets
        the connection and the client would never see it; at most MAX_REFUSING such waits at once,
        past that the connection is closed at once."""
        if why == "address":
            cap = self.config.conns_per_address
            log.warning("web_connection_refused", extra={"fields": {"address": address, "limit": cap}})
            response = self._error(429, f"too many connections from your address (limit {cap}): try again\n")
        else:
            log.warning("web_server_full", extra={"fields": {"limit": self.config.max_clients}})
            response = self._error(503, "the page's server is busy: try again\n")
        if self._refusing >= MAX_REFUSING:
            writer.transport.abort()
            return
        self._refusing += 1
        try:
            with contextlib.suppress(TimeoutError, ConnectionError, h11.RemoteProtocolError):
                async with asyncio.timeout(REFUSAL_READ_S):
                    await read_request(reader)
            writer.write(response)
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(writer.drain(), REFUSAL_READ_S)
        finally:
            self._refusing -= 1
            writer.close()

    # ---------------------------------------------------------------- requests

    def respond(self, request: h11.Request) -> bytes:
        """The whole response to one request (its line and headers, parsed by h11)."""
        if request.http_version not in (b"1.0", b"1.1"):
            return self._error(505, "only HTTP/1.0 and HTTP/1.1 are served here\n")
        target = request.target.decode("ascii", "replace")
        if not target.startswith("/"):
            return self._error(400, "malformed request line: the target must be a path\n")
        if request.method != b"GET":
            return self._error(405, "only GET is served here\n", extra={"Allow": "GET"})
        path = target.split("?", 1)[0].split("#", 1)[0]
        if path == "/" or (path.startswith("/watch/") and is_room_code(path[len("/watch/") :])):
            hosts = [value for name, value in request.headers if name == b"host"]
            ws_url = self._ws_url(hosts[0].decode("latin-1") if hosts else "")
            if ws_url is None:
                return self._error(400, "missing or malformed Host header\n")
            page = self._page.replace(WS_URL_SLOT, html.escape(ws_url, quote=True))
            return self._response(200, page.encode("utf-8"), CONTENT_TYPES[".html"], ws_url)
        found = self._static.get(path)
        if found is not None:
            return self._response(200, found.body, found.content_type, None)
        return self._error(404, "not found\n")

    async def _api_response(self, request: h11.Request) -> bytes | None:
        """A GET of the JSON API's paths (server/web/api.py); None: not one of them."""
        if self.api is None or request.method != b"GET" or request.http_version not in (b"1.0", b"1.1"):
            return None
        target = request.target.decode("ascii", "replace")
        if not self.api.handles(target.split("?", 1)[0]):
            return None
        status, body = await self.api.answer(target)
        extra = {"Access-Control-Allow-Origin": "*", "Cache-Control": "max-age=1"}
        return self._response(status, body, JSON_TYPE, None, extra)

    def _ws_url(self, host_header: str) -> str | None:
        if self.config.public_ws_url is not None:
            return self.config.public_ws_url  # the Host is never echoed then
        host = host_of(host_header)
        if host is None:
            return None
        return f"{self._game_scheme}://{host}:{self._game_port()}/"

    @property
    def evicted(self) -> int:
        """Idle connections cut to make room for new ones, since the start."""
        return self._slots.evicted

    def _error(self, status: int, text: str, extra: dict[str, str] | None = None) -> bytes:
        return self._response(status, text.encode(), PLAIN, None, extra)

    @staticmethod
    def _response(
        status: int, body: bytes, content_type: str, ws_url: str | None, extra: dict[str, str] | None = None
    ) -> bytes:
        headers = {
            "Content-Type": content_type,
            "Content-Length": str(len(body)),
            "Cache-Control": "no-cache",
            "Connection": "close",
            "Server": "plot-server",
            "Content-Security-Policy": content_security_policy(ws_url),
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            **(extra or {}),
        }
        head = f"HTTP/1.1 {status} {REASONS[status]}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return head.encode("latin-1") + b"\r\n" + body
