"""Helpers for the spectator page's tests (tests/test_web_*.py) and its screenshot script.

The browser is the system's Chromium (Debian's ``chromium`` package; ``scripts/setup.sh`` installs it
where it is missing), driven by Playwright for Python through ``executable_path``: Playwright's
own browser download is never used. ``$PLOT_TEST_CHROMIUM`` names another binary.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page

from server.shell import RaceServer
from server.web import WebConfig, WebServer

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    configured = os.environ.get("PLOT_TEST_CHROMIUM")
    if configured:
        return configured
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        "no Chromium found for the browser tests: install it (Debian: apt-get install chromium; scripts/setup.sh does) "
        "or set PLOT_TEST_CHROMIUM to its path"
    )


@asynccontextmanager
async def web_server_for(server: RaceServer | Callable[[], int], **config: Any) -> AsyncIterator[WebServer]:
    """The page's server on a free loopback port (``config``: WebConfig fields), pointing at
    ``server``'s game port."""
    game_port = (lambda: server.port) if isinstance(server, RaceServer) else server
    web = WebServer(WebConfig(**{"host": "127.0.0.1", "port": 0, **config}), game_port=game_port)
    await web.start()
    try:
        yield web
    finally:
        await web.stop()


async def http_get(
    port: int, request: bytes, host: str = "127.0.0.1", source: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes to host:port (from ``source``, an address of this machine); the
    status, headers (lower-case names) and body."""
    local = None if source is None else (source, 0)
    reader, writer = await asyncio.open_connection(host, port, local_addr=local)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0) -> None:
    """Poll ``check`` until it is true; fail saying ``what`` did not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
        await asyncio.sleep(0.05)


class PageWatch:
    """A page with every script error, console error and dialog recorded: none is expected. The
    URL of every WebSocket it opens is kept too (``sockets``)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        self.sockets: list[str] = []
        page.on("websocket", lambda socket: self.sockets.append(socket.url))
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("dialog", lambda dialog: self.problems.append(f"dialog: {dialog.message}"))


async def open_page(browser: Browser, url: str, prepare: Callable[[Page], Awaitable[None]] | None = None) -> PageWatch:
    """A new page at ``url``; ``prepare`` runs before it loads (to route its WebSocket, say)."""
    page = await browser.new_page(accept_downloads=True)
    watched = PageWatch(page)
    if prepare is not None:
        await prepare(page)
    await page.goto(url)
    return watched


async def run_as_printed(line: str, folder: Path) -> tuple[int, str]:
    """Run a command line the page printed, as a person would paste it: through ``sh``, in
    ``folder``, with this venv's ``plot`` on the PATH. Its exit status and its output."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", line, cwd=folder, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, output.decode()
