"""A tiny HTTP/1.1 file server for the spectator page, on asyncio streams (no framework).

Only GET is served (anything else: 405), one request per connection (``Connection: close``),
from a fixed table built at start-up: ``/`` and ``/watch/CODE`` give the page, ``/static/...``
its files; every other path is 404. A file name never reaches the file system, so no path can
escape the folder. Every response carries the security headers: a Content-Security-Policy that
allows this origin's scripts and styles and a WebSocket to the game port only, ``nosniff``, no
framing, no referrer.

The page learns the game server's WebSocket URL from a ``<meta>`` tag filled in per request:
the host name the browser used (from ``Host``, checked) with the game port, ``ws://`` or
``wss://`` as the game port speaks, unless ``public_ws_url`` names it (behind a proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from server.proxy import ProxyHeaderRefused, TrustedProxies, log_refused, read_header
from shared.protocol import is_room_code

log = logging.getLogger("plot.web")

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
PAGE_TEMPLATE = HERE / "page.html"
WS_URL_SLOT = "__PLOT_WS_URL__"

MAX_HEAD_BYTES = 8192  # request line + headers; the page sends nothing bigger
READ_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_CLIENTS = 256  # open HTTP connections at once; past it new ones are closed unanswered

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
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}
# A host name or an IPv4 address, or an IPv6 address in brackets; then an optional port.
HOST_HEADER = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$")


@dataclass
class WebConfig:
    host: str = "127.0.0.1"
    port: int = 8766  # 0: any free port (tests)
    # The WebSocket URL the page connects to when the browser cannot reach the game port under the
    # host name it used for the page (a reverse proxy, say): e.g. wss://race.example.org/
    public_ws_url: str | None = None
    reuse_port: bool = False  # SO_REUSEPORT: several processes serve the page (plot-server --workers)
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


def check_public_ws_url(url: str) -> str:
    """A ``ws://`` or ``wss://`` URL with a host, else ValueError saying why."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"not a WebSocket URL: {url!r} (expected ws://HOST:PORT/ or wss://HOST/)")
    if any(ch in url for ch in "\"'<> \r\n"):
        raise ValueError(f"unexpected characters in the WebSocket URL {url!r}")
    return url


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
    ) -> None:
        self.config = config
        self._game_port = game_port
        self._game_scheme = "wss" if game_tls else "ws"
        self._ssl = ssl_context
        self._static = load_static()
        self._page = PAGE_TEMPLATE.read_text(encoding="utf-8")
        self._server: asyncio.Server | None = None
        self._clients = 0
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
        if self._clients >= MAX_CLIENTS:
            writer.close()
            return
        self._clients += 1
        try:
            try:
                head = await asyncio.wait_for(self._read_head(reader, writer), READ_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                response = self._error(431, "the request head is too large\n")
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return  # the client went away or never finished: nothing to answer
            except ProxyHeaderRefused as exc:
                log_refused(exc, writer.get_extra_info("peername"))
                return  # closed unanswered
            else:
                response = self.respond(head)
            writer.write(response)
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        finally:
            self._clients -= 1
            writer.close()
            with contextlib.suppress(Exception):  # the peer may be gone already; nothing to do about it
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_head(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        """The request head, after a trusted proxy's PROXY header (which names the client; the
        page is the same for every client, so nothing here counts by address yet)."""
        _client, before = await read_header(reader, writer.get_extra_info("peername"), self.config.trusted_proxies)
        return before + await reader.readuntil(b"\r\n\r\n")  # ``before``: a few bytes, never a whole head

    # ---------------------------------------------------------------- requests

    def respond(self, head: bytes) -> bytes:
        """The whole response to one request head (request line and headers)."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            return self._error(400, "malformed request line\n")
        method, target, _version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                return self._error(400, "malformed header\n")
            headers[name.lower()] = value.strip()
        if method != "GET":
            return self._error(405, "only GET is served here\n", extra={"Allow": "GET"})
        path = target.split("?", 1)[0].split("#", 1)[0]
        if path == "/" or (path.startswith("/watch/") and is_room_code(path[len("/watch/") :])):
            ws_url = self._ws_url(headers.get("host", ""))
            if ws_url is None:
                return self._error(400, "missing or malformed Host header\n")
            page = self._page.replace(WS_URL_SLOT, html.escape(ws_url, quote=True))
            return self._response(200, page.encode("utf-8"), CONTENT_TYPES[".html"], ws_url)
        found = self._static.get(path)
        if found is not None:
            return self._response(200, found.body, found.content_type, None)
        return self._error(404, "not found\n")

    def _ws_url(self, host_header: str) -> str | None:
        if self.config.public_ws_url is not None:
            return self.config.public_ws_url
        match = HOST_HEADER.match(host_header)
        if match is None:
            return None
        return f"{self._game_scheme}://{match.group(1)}:{self._game_port()}/"

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
