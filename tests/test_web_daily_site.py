"""The daily pages' HTTP side (server/web/site.py), over real loopback sockets: which paths give
the daily page, and the CSP that lets it read this origin's JSON API."""

from __future__ import annotations

from support import running_server
from web_helpers import http_get, web_server_for


def get(path: str, host: str = "127.0.0.1:8766") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: test\r\n\r\n".encode()


async def test_the_daily_pages_are_served_with_a_csp_for_the_api() -> None:
    async with running_server() as server, web_server_for(server) as web:
        for path in ("/daily", "/daily/", "/daily/20424", "/daily/2026-12-02", "/player/alice", "/player/%D0%B0lice"):
            status, headers, body = await http_get(web.port, get(path))
            assert status == 200, path
            assert headers["content-type"] == "text/html; charset=utf-8"
            csp = headers["content-security-policy"]
            # This origin (the JSON API) and the game port's WebSocket (today's board live): nothing else.
            assert f"connect-src 'self' ws://127.0.0.1:{server.port};" in csp, path
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert b'<script type="module" src="/static/daily.js">' in body
            assert f'<meta name="plot-ws-url" content="ws://127.0.0.1:{server.port}/">'.encode() in body
        # The room pages keep their policy: the game port only.
        _status, headers, body = await http_get(web.port, get("/"))
        assert f"connect-src ws://127.0.0.1:{server.port};" in headers["content-security-policy"]
        assert b'href="/daily"' in body  # the front page links today's daily deal
        for path in ("/daily/x", "/daily/12/3", "/daily/2026-1-2", "/daily/1234567890", "/player/", "/player/a/b"):
            status, _headers, _body = await http_get(web.port, get(path))
            assert status == 404, path
        status, headers, _body = await http_get(web.port, get("/static/daily.js"))
        assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
