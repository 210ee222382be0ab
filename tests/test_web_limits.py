"""The spectator page's port under attack, over real loopback sockets (docs/reliability.md, "The
spectator page's port"): idle connections cannot keep an honest request out, the per-address
cap, the deadline for the whole request head, and the request checks (Host, HTTP version,
bare-LF heads)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from support import eventually, running_server
from web_helpers import http_get, web_server_for

ATTACKER = "127.0.0.1"
HONEST = "127.0.0.2"


def get(path: str = "/", host: str = "127.0.0.1:8766", version: str = "1.1", eol: str = "\r\n") -> bytes:
    return f"GET {path} HTTP/{version}{eol}Host: {host}{eol}User-Agent: test{eol}{eol}".encode()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@asynccontextmanager
async def idle_flood(
    port: int, count: int, host: str = "127.0.0.1", source: str = ATTACKER
) -> AsyncIterator[dict[str, int]]:
    """``count`` connections that never send a byte, each reopened as soon as the server closes
    it (an eviction, a 429). Counts ``opened`` and ``closed_by_server``. Opened 25 at a time:
    a burst past the listen backlog leaves connections the server has not accepted yet."""
    counts = {"opened": 0, "closed_by_server": 0}
    stop = asyncio.Event()

    async def hold(n: int) -> None:
        await asyncio.sleep(n // 25 * 0.05)
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            except OSError:
                await asyncio.sleep(0.01)
                continue
            counts["opened"] += 1
            read = asyncio.ensure_future(reader.read())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([read, stopped], return_when=asyncio.FIRST_COMPLETED)
            if read.done():
                counts["closed_by_server"] += 1
            read.cancel()
            stopped.cancel()
            writer.transport.abort()

    holders = [asyncio.ensure_future(hold(n)) for n in range(count)]
    try:
        await eventually(lambda: counts["opened"] >= count, what=f"{count} idle connections open")
        yield counts
    finally:
        stop.set()
        await asyncio.gather(*holders, return_exceptions=True)


async def honest_gets(port: int, count: int, host: str = "127.0.0.1", source: str = HONEST) -> list[int]:
    statuses = []
    for _ in range(count):
        status, _, body = await http_get(
            port, get(host=f"{host}:{port}" if ":" not in host else f"[{host}]"), host, source
        )
        assert status != 200 or b'name="plot-ws-url"' in body
        statuses.append(status)
    return statuses


@pytest.mark.parametrize("per_address", [32, 0], ids=["default-cap", "no-per-address-cap"])
async def test_300_idle_connections_reopened_as_closed_cannot_keep_honest_requests_out(per_address: int) -> None:
    """From one address, 300 idle sockets: with the per-address cap they hold 32 slots (the rest
    are refused, 429); without it they fill all 256 and every newcomer evicts the oldest idle.
    Either way the honest client, on another address, is served every time."""
    async with (
        running_server() as server,
        web_server_for(server, conns_per_address=per_address) as web,
        idle_flood(web.port, 300) as flood,
    ):
        if per_address == 0:
            await eventually(lambda: flood["closed_by_server"] > 0, what="idle connections evicted")
        statuses = await honest_gets(web.port, 17)
        assert statuses == [200] * 17
        assert flood["closed_by_server"] > 0  # the flood was refused or evicted, not served


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no ::1")
async def test_over_ipv6_idle_connections_are_evicted_for_a_request() -> None:
    async with (
        running_server() as server,
        web_server_for(server, host="::1", conns_per_address=0) as web,
        idle_flood(web.port, 300, host="::1", source="::1") as flood,
    ):
        await eventually(lambda: flood["closed_by_server"] > 0, what="idle connections evicted")
        statuses = await honest_gets(web.port, 10, host="::1", source="::1")
        assert statuses == [200] * 10


async def test_connections_past_the_per_address_cap_get_429_and_other_addresses_are_served() -> None:
    async with running_server() as server, web_server_for(server, conns_per_address=4) as web:
        held = [await asyncio.open_connection("127.0.0.1", web.port, local_addr=(ATTACKER, 0)) for _ in range(4)]
        try:
            status, _, body = await http_get(web.port, get(), source=ATTACKER)
            assert status == 429 and b"limit 4" in body
            status, _, _ = await http_get(web.port, get(), source=HONEST)
            assert status == 200
            held.pop()[1].close()  # one given back: the address may open another

            async def admitted() -> bool:
                status, _, _ = await http_get(web.port, get(), source=ATTACKER)
                return status == 200

            await eventually(admitted, what="a slot given back to the address")
        finally:
            for _reader, writer in held:
                writer.close()


async def test_the_whole_head_has_a_deadline_not_each_read() -> None:
    """A client trickling its head a byte every 0.2 s is answered 408 once the deadline (1 s
    here) has passed: a deadline per read would let it hold its slot as long as it trickles."""
    async with running_server() as server, web_server_for(server, head_timeout_s=1.0) as web:
        reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
        started = time.monotonic()
        answer = b""
        try:
            for byte in get() * 10:  # 40 s of trickle if nothing cut it
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    answer = await asyncio.wait_for(reader.read(), 0.2)
                if answer:
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:40]
        assert time.monotonic() - started < 20  # long before the trickle would have ended


async def test_the_host_header_is_checked_strictly() -> None:
    async with running_server() as server, web_server_for(server) as web:
        bad = ["a" * 7000, "-", "...", "a:99999", "a:0", "a:", ":80", "a:b", "999.1.1.1", "1.2.3", "[::1", "[zz]"]
        bad += ["[::1]x", "a..b", "-a.b", "a-.b", "a_b", "a%2eb", "a" * 64 + ".org", ("a" * 60 + ".") * 5 + "org"]
        for host in bad:
            status, headers, body = await http_get(web.port, get(host=host))
            assert status == 400 and b"Host" in body, host
            assert "connect-src 'none'" in headers["content-security-policy"], host
        good = {"localhost": "localhost", "example.org.": "example.org.", "1.2.3.4:80": "1.2.3.4"}
        good |= {"[::1]:8766": "[::1]", "xn--bcher-kva.example:65535": "xn--bcher-kva.example"}
        for host, shown in good.items():
            status, headers, _ = await http_get(web.port, get(host=host))
            assert status == 200, host
            assert f"connect-src ws://{shown}:{server.port};" in headers["content-security-policy"], host


async def test_with_a_public_address_the_host_is_never_echoed() -> None:
    async with (
        running_server() as server,
        web_server_for(server, public_ws_url="wss://race.example.org/") as web,
    ):
        status, headers, body = await http_get(web.port, get(host="evil.example"))
        assert status == 200 and b"evil" not in body
        assert "evil" not in headers["content-security-policy"]
        assert "connect-src wss://race.example.org;" in headers["content-security-policy"]


async def test_bare_lf_heads_are_answered_at_once_and_only_http_1_0_and_1_1_are_served() -> None:
    async with running_server() as server, web_server_for(server, head_timeout_s=30.0) as web:
        # Answered, not held until a deadline: http_get gives up after 10 s, the deadline is 30.
        status, _, body = await http_get(web.port, get(eol="\n"))
        assert status == 200 and b'name="plot-ws-url"' in body
        status, _, _ = await http_get(web.port, b"GET / HTTP/1.1\nHost: a\r\n\n")
        assert status == 200
        for version in ("1.99999", "11", "1", "x.y"):
            status, _, _ = await http_get(web.port, get(version=version))
            assert status == 400, version
        for version in ("2.0", "0.9", "3.1"):
            status, _, body = await http_get(web.port, get(version=version))
            assert status == 505 and b"HTTP/1.0 and HTTP/1.1" in body, version
        status, _, _ = await http_get(web.port, get(version="1.0"))
        assert status == 200
        status, _, _ = await http_get(web.port, b"GET /static/watch.css HTTP/1.0\r\n\r\n")  # no Host: a file is fine
        assert status == 200
        status, _, body = await http_get(web.port, b"GET / HTTP/1.0\r\n\r\n")  # ... the page needs one
        assert status == 400 and b"Host" in body
        for raw in (b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"):
            status, _, body = await http_get(web.port, raw)
            assert status == 400 and b"Host" in body, raw
        status, _, _ = await http_get(web.port, b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n")
        assert status == 400
