"""The spectator page's HTTP side (server/web/site.py), over real loopback sockets: what is
served, on which method, with which headers; and ``plot-server --web-port`` serving it."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

import pytest
from redis_fixture import free_port
from support import running_server, server_process, wait_healthy
from web_helpers import http_get, web_server_for

from server.web import WebConfig, WebServer
from server.web.site import MAX_HEAD_BYTES, STATIC_DIR

VENDOR = STATIC_DIR / "vendor" / "msgpack"


def get(path: str, host: str = "127.0.0.1:8766", method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: test\r\n\r\n".encode()


async def test_page_and_files_are_served_with_security_headers() -> None:
    async with running_server() as server, web_server_for(server) as web:
        for path in ("/", "/watch/K7QXM", "/?x=1"):
            status, headers, body = await http_get(web.port, get(path))
            assert status == 200, path
            assert headers["content-type"] == "text/html; charset=utf-8"
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["x-frame-options"] == "DENY"
            csp = headers["content-security-policy"]
            # Its own scripts and styles, and exactly the game port's WebSocket: nothing else.
            assert "default-src 'none'" in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
            assert f"connect-src ws://127.0.0.1:{server.port};" in csp
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert f'<meta name="plot-ws-url" content="ws://127.0.0.1:{server.port}/">'.encode() in body
            assert b'<script type="module" src="/static/watch.js">' in body
            assert int(headers["content-length"]) == len(body)
        status, headers, body = await http_get(web.port, get("/static/watch.js"))
        assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
        assert body == (STATIC_DIR / "watch.js").read_bytes()
        status, headers, body = await http_get(web.port, get("/static/vendor/msgpack/index.mjs"))
        assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
        assert b"export" in body
        status, headers, _ = await http_get(web.port, get("/static/watch.css"))
        assert status == 200 and headers["content-type"] == "text/css; charset=utf-8"


async def test_unknown_paths_404_and_only_get_is_served() -> None:
    async with running_server() as server, web_server_for(server) as web:
        unknown = ["/nope", "/watch/", "/watch/k7qxm", "/watch/K7QX0", "/watch/K7QXM/x", "/static/", "/page.html"]
        unknown += ["/static/../site.py", "/static/%2e%2e/site.py", "/healthz", "/static/missing.js"]
        for path in unknown:
            status, headers, _ = await http_get(web.port, get(path))
            assert status == 404, path
            assert headers["x-content-type-options"] == "nosniff"
        for method in ("POST", "PUT", "DELETE", "HEAD", "OPTIONS"):
            status, headers, _ = await http_get(web.port, get("/", method=method))
            assert status == 405 and headers["allow"] == "GET", method


async def test_bad_requests_get_a_clear_answer_and_the_server_keeps_serving() -> None:
    async with running_server() as server, web_server_for(server) as web:
        bad_hosts = ['evil"><script>', "a b", "", "x:99999999"]
        for host in bad_hosts:
            status, _, body = await http_get(web.port, get("/", host=host))
            assert status == 400 and b"Host" in body, host
        malformed = [b"GET /\r\n\r\n", b"garbage\r\n\r\n", b"GET x HTTP/1.1\r\n\r\n"]
        malformed.append(b"GET / HTTP/1.1\r\nno colon\r\n\r\n")
        for raw in malformed:
            status, _, _ = await http_get(web.port, raw)
            assert status == 400, raw
        huge = b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * (MAX_HEAD_BYTES * 2) + b"\r\n\r\n"
        status, _, _ = await http_get(web.port, huge)
        assert status == 431
        # A client that connects and says nothing, or hangs up mid-request, harms no one.
        _reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
        writer.write(b"GET / HT")
        await writer.drain()
        writer.close()
        # An IPv6 literal and a host name both work; the page connects to the name the browser used.
        status, headers, _ = await http_get(web.port, get("/", host="[::1]:8766"))
        assert status == 200 and f"connect-src ws://[::1]:{server.port};" in headers["content-security-policy"]
        status, headers, _ = await http_get(web.port, get("/", host="localhost"))
        assert status == 200 and f"connect-src ws://localhost:{server.port};" in headers["content-security-policy"]


async def test_public_ws_url_is_used_as_given_and_checked() -> None:
    web = WebServer(WebConfig(port=0, public_ws_url="wss://race.example.org/plot"), game_port=lambda: 1)
    await web.start()
    try:
        status, headers, body = await http_get(web.port, get("/"))
        assert status == 200
        assert "connect-src wss://race.example.org;" in headers["content-security-policy"]
        assert b'content="wss://race.example.org/plot"' in body
    finally:
        await web.stop()
    for bad in ("http://x/", "ws://", 'ws://x/"><script>'):
        with pytest.raises(ValueError):
            WebServer(WebConfig(port=0, public_ws_url=bad), game_port=lambda: 1)


def test_the_vendored_codec_is_complete_with_its_licence() -> None:
    """Every module the codec's entry point imports, transitively, is in the package, with the
    ISC licence and the version it was taken from (docs/web.md says how to update it)."""
    seen: set[Path] = set()
    todo = [VENDOR / "index.mjs"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        assert module.is_file(), module
        for target in re.findall(r'from "(\.[^"]+)"', module.read_text()):
            todo.append((module.parent / target).resolve())
    assert len(seen) >= 10
    assert "Copyright 2019 The MessagePack Community" in (VENDOR / "LICENSE").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+\n", (VENDOR / "VERSION").read_text())


async def test_plot_server_serves_the_page_on_its_web_port() -> None:
    port, web_port = free_port(), free_port()
    with server_process("--port", str(port), "--web-port", str(web_port)) as process:
        await asyncio.to_thread(wait_healthy, process, port)

        def fetch() -> tuple[int, str, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/watch/K7QXM", timeout=5) as response:
                return response.status, response.headers["Content-Security-Policy"], response.read().decode()

        status, csp, body = await asyncio.to_thread(fetch)
        assert status == 200 and f"connect-src ws://127.0.0.1:{port};" in csp
        assert f'content="ws://127.0.0.1:{port}/"' in body


def test_the_web_port_defaults_to_the_game_port_plus_one_and_zero_turns_it_off() -> None:
    from server.cli import ConfigError, build_parser, config_from_args, make_web_server
    from server.shell import RaceServer
    from server.store.memory import MemoryStore

    def web_for(*argv: str) -> WebServer | None:
        args = build_parser().parse_args(argv)
        config = config_from_args(args)
        return make_web_server(args, config, RaceServer(MemoryStore(), config))

    default = web_for()
    assert default is not None and default.config.port == 8766 and default.config.host == "127.0.0.1"
    moved = web_for("--port", "9100", "--host", "::1")
    assert moved is not None and (moved.config.port, moved.config.host) == (9101, "::1")
    chosen = web_for("--web-port", "9200")
    assert chosen is not None and chosen.config.port == 9200
    assert web_for("--web-port", "0") is None
    assert web_for("--port", "0") is None  # any free game port: say which page port with --web-port
    with pytest.raises(ConfigError):
        web_for("--web-ws-url", "http://not-a-websocket/")


def test_the_page_builds_no_markup_from_strings() -> None:
    """Server strings reach the page as text only (textContent, text nodes): no API that parses
    a string as HTML or code appears in the page's scripts."""
    for script in ("watch.js", "replay.js"):
        source = (STATIC_DIR / script).read_text()
        for parser in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert parser not in source, (script, parser)


def test_every_page_file_ships_in_the_wheel() -> None:
    """Each file of the page matches the package-data globs in pyproject.toml (a new folder
    under static/ needs its own glob, or the installed server would 404 it)."""
    import fnmatch
    import tomllib

    root = STATIC_DIR.parent
    pyproject = tomllib.loads((root.parent.parent / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["server.web"]
    files = [path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()]
    page_files = [f for f in files if not f.endswith((".py", ".pyc"))]
    assert "page.html" in page_files and "static/vendor/msgpack/utils/utf8.mjs" in page_files
    for name in page_files:
        # setuptools globs do not cross folders: '*' stops at '/'
        assert any(fnmatch.fnmatch(name, g) and name.count("/") == g.count("/") for g in globs), name
