"""The PROXY protocol from trusted proxies (server/proxy.py; docs/reliability.md, "Clients behind a
balancer"): a real server and web port on loopback, headers written by hand on real sockets.

The proxy is 127.0.0.1; other loopback addresses (127.0.0.2) stand for clients that are not
proxies. The addresses inside the headers are documentation addresses (TEST-NET, 2001:db8::/32):
they are the clients the proxy speaks for, never connected to."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from dataclasses import replace
from typing import Any

import pytest
from support import Client, eventually, fast_config, running_server
from websockets.asyncio.client import connect

from server.limits import LimitsConfig
from server.proxy import MAX_HEADER_BYTES, ProxyHeaderReader, ProxyHeaderRefused, TrustedProxies
from server.shell import RaceServer, ServerConfig
from server.web.site import WebConfig, WebServer
from shared import protocol as p

PROXY = "127.0.0.1"
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(client: str, port: int = 40000) -> bytes:
    family = "TCP6" if ":" in client else "TCP4"
    target = "::1" if family == "TCP6" else "127.0.0.1"
    return f"PROXY {family} {client} {target} {port} 8765\r\n".encode()


def v2(client: str, port: int = 40000) -> bytes:
    """A v2 PROXY command for a TCP client (what HAProxy's send-proxy-v2 sends, without TLVs)."""
    ip = ipaddress.ip_address(client)
    target = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
    family = 0x21 if ip.version == 6 else 0x11  # AF_INET6 / AF_INET, STREAM
    addresses = ip.packed + target.packed + struct.pack("!HH", port, 8765)
    return V2_SIGNATURE + bytes([0x21, family]) + struct.pack("!H", len(addresses)) + addresses


def v2_local() -> bytes:
    """A v2 LOCAL command (a proxy's own connection: a health check)."""
    return V2_SIGNATURE + bytes([0x20, 0x00]) + struct.pack("!H", 0)


def trusting(trusted: str, **caps: Any) -> ServerConfig:
    limits = replace(LimitsConfig.per_address_off(), trusted_proxies=TrustedProxies.parse(trusted), **caps)
    return fast_config(limits=limits)


def sent_from(source: str, port: int, header: bytes = b"") -> socket.socket:
    """A TCP connection from loopback address ``source`` that has sent ``header``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    if header:
        sock.sendall(header)
    sock.setblocking(False)
    return sock


async def player(server: RaceServer, name: str, header: bytes = b"", source: str = PROXY) -> Client:
    sock = sent_from(source, server.port, header)
    client = Client(await connect(f"ws://127.0.0.1:{server.port}", sock=sock, compression=None), name)
    await client.hello(name)
    return client


async def answer(sock: socket.socket, request: bytes) -> bytes:
    """The head of the server's answer to ``request`` (b"": it closed without one)."""
    loop = asyncio.get_running_loop()
    received = b""
    with contextlib.suppress(ConnectionError):
        await loop.sock_sendall(sock, request)
        while b"\r\n\r\n" not in received and (chunk := await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)):
            received += chunk
    sock.close()
    return received


UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


async def spend_failed_joins(client: Client, budget: int) -> p.Error:
    """``budget`` joins of rooms that do not exist, then one more: the answer to that one."""
    for _ in range(budget):
        await client.send(p.Join(code="22222"))
        assert (await client.expect(p.Error)).code == p.UNKNOWN_ROOM
    await client.send(p.Join(code="22222"))
    return await client.expect(p.Error)


async def host_room(server: RaceServer) -> tuple[Client, str]:
    host = await player(server, "Host", source="127.0.0.2")
    await host.send(p.CreateRoom())
    return host, (await host.expect(p.Room)).code


@pytest.mark.parametrize(
    ("header", "attacker", "honest"),
    [
        (v1, "198.51.100.7", "198.51.100.8"),
        (v2, "198.51.100.7", "198.51.100.8"),
        (v1, "2001:db8::7", "2001:db8:0:1::8"),  # IPv6: counted by /64, these are two
        (v2, "2001:db8::7", "2001:db8:0:1::8"),
    ],
)
async def test_behind_a_trusted_proxy_one_clients_bad_joins_spend_only_its_own_budget(
    header: Any, attacker: str, honest: str
) -> None:
    async with running_server(config=trusting(PROXY, join_failures_per_minute=3)) as server:
        host, code = await host_room(server)
        guesser = await player(server, "Guess", header(attacker))
        refused = await spend_failed_joins(guesser, 3)
        assert refused.code == p.RATE_LIMITED and refused.ref == "join", refused
        friend = await player(server, "Friend", header(honest))
        await friend.send(p.Join(code="33333"))
        assert (await friend.expect(p.Error)).code == p.UNKNOWN_ROOM  # its own budget, not the guesser's
        await friend.send(p.Join(code=code))
        assert (await friend.expect(p.Room)).code == code
        again = await player(server, "Guess2", header(attacker, 40001))  # the guesser on a new connection
        await again.send(p.Join(code=code))
        assert (await again.expect(p.Error)).code == p.RATE_LIMITED  # still its own spent budget
        for client in (host, guesser, friend, again):
            await client.close()


async def test_without_trust_everyone_at_one_address_shares_the_budget() -> None:
    async with running_server(config=trusting("", join_failures_per_minute=3)) as server:
        host, code = await host_room(server)
        guesser = await player(server, "Guess")
        assert (await spend_failed_joins(guesser, 3)).code == p.RATE_LIMITED
        friend = await player(server, "Friend")  # the same address: the same spent budget
        await friend.send(p.Join(code=code))
        assert (await friend.expect(p.Error)).code == p.RATE_LIMITED
        for client in (host, guesser, friend):
            await client.close()


@pytest.mark.parametrize("trusted", ["", "10.0.0.0/8", "127.0.0.1"])
@pytest.mark.parametrize("header", [v1("198.51.100.9"), v2("198.51.100.9"), v2_local()])
async def test_a_proxy_header_from_an_address_that_is_not_trusted_is_refused_unanswered(
    trusted: str, header: bytes
) -> None:
    async with running_server(config=trusting(trusted, join_failures_per_minute=3)) as server:
        assert await answer(sent_from("127.0.0.2", server.port, header), UPGRADE) == b""
        # That address is still itself: its spent budget is not escaped by claiming another.
        guesser = await player(server, "Guess", source="127.0.0.2")
        assert (await spend_failed_joins(guesser, 3)).code == p.RATE_LIMITED
        assert await answer(sent_from("127.0.0.2", server.port, header), UPGRADE) == b""
        plain = sent_from("127.0.0.2", server.port)  # a connection without a header is served as before
        assert (await answer(plain, UPGRADE)).startswith(b"HTTP/1.1 101")
        await guesser.close()


async def test_a_trusted_proxy_that_sends_no_header_is_counted_at_its_own_address() -> None:
    async with running_server(config=trusting(PROXY, join_failures_per_minute=3)) as server:
        host, code = await host_room(server)
        own = await player(server, "Own")  # from the proxy, no header: the proxy's own budget
        assert (await spend_failed_joins(own, 3)).code == p.RATE_LIMITED
        local = await player(server, "Check", v2_local())  # LOCAL (a health check): the proxy's own too
        await local.send(p.Join(code=code))
        assert (await local.expect(p.Error)).code == p.RATE_LIMITED
        named = await player(server, "Named", v2("198.51.100.10"))
        await named.send(p.Join(code=code))
        assert (await named.expect(p.Room)).code == code
        for client in (host, own, local, named):
            await client.close()


@pytest.mark.parametrize(
    "header",
    [
        b"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n",
        b"PROXY TCP4 198.51.100.1 127.0.0.1 99999 8765\r\n",
        b"PROXY " + b"x" * 120 + b"\r\n",  # past the 107 bytes a v1 line may take
        V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack("!H", MAX_HEADER_BYTES),  # too long
        V2_SIGNATURE + bytes([0x31, 0x11]) + struct.pack("!H", 12) + bytes(12),  # version 3
    ],
)
async def test_a_malformed_header_from_a_trusted_proxy_is_refused(header: bytes) -> None:
    async with running_server(config=trusting(PROXY)) as server:
        assert await answer(sent_from(PROXY, server.port, header), UPGRADE) == b""
        fine = await player(server, "Fine", v2("198.51.100.11"))  # and the server goes on
        await fine.close()


def test_a_header_in_pieces_is_read_whole_and_the_rest_handed_on() -> None:
    for header in (v1("198.51.100.12", 4321), v2("198.51.100.12", 4321), v2("2001:db8::12", 4321)):
        reader = ProxyHeaderReader(("127.0.0.1", 5555), trusted=True)
        data = header + b"GET / HTTP/1.1\r\n"
        results = [reader.feed(data[i : i + 1]) for i in range(len(header) - 1)]
        assert results == [None] * (len(header) - 1)
        assert reader.feed(data[len(header) - 1 :]) == b"GET / HTTP/1.1\r\n"
        host = "2001:db8::12" if b"\x21\x21" in header or b"TCP6" in header else "198.51.100.12"
        assert reader.client == (host, 4321) and reader.proxied
    plain = ProxyHeaderReader(("127.0.0.1", 5555), trusted=True)
    assert plain.feed(b"P") is None and plain.feed(b"OST / HTTP/1.1") == b"POST / HTTP/1.1"  # not "PROXY "
    assert plain.client == ("127.0.0.1", 5555) and not plain.proxied
    untrusted = ProxyHeaderReader(("127.0.0.2", 5555), trusted=False)
    assert untrusted.feed(b"PROX") is None
    with pytest.raises(ProxyHeaderRefused, match="not a trusted proxy"):
        untrusted.feed(b"Y TCP4")


def test_trusted_proxies_parse_addresses_and_networks_and_refuse_the_rest() -> None:
    trusted = TrustedProxies.parse("10.0.0.0/8, 127.0.0.1 ,::1,")
    assert str(trusted) == "10.0.0.0/8,127.0.0.1/32,::1/128"
    assert trusted.trusts(("10.2.3.4", 1)) and trusted.trusts(("127.0.0.1", 1)) and trusted.trusts(("::1", 1, 0, 0))
    assert trusted.trusts(("::ffff:10.0.0.1", 1, 0, 0))  # an IPv4-mapped peer on a dual-stack socket
    assert not trusted.trusts(("127.0.0.2", 1)) and not trusted.trusts("local")
    assert not TrustedProxies().trusts(("::1", 1))
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300'"):
        TrustedProxies.parse("10.0.0.0/8,10.0.0.300")


async def web_get(port: int, source: str, header: bytes) -> bytes:
    return await answer(sent_from(source, port, header), b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")


@pytest.mark.parametrize("header", [v1("198.51.100.13"), v2("198.51.100.13"), v2_local(), b""])
async def test_the_web_port_reads_a_trusted_proxys_header_and_refuses_anyone_elses(header: bytes) -> None:
    web = WebServer(
        WebConfig(host="127.0.0.1", port=0, trusted_proxies=TrustedProxies.parse(PROXY)), game_port=lambda: 8765
    )
    await web.start()
    try:
        assert (await web_get(web.port, PROXY, header)).startswith(b"HTTP/1.1 200 OK")
        untrusted = await web_get(web.port, "127.0.0.2", header)
        if header:
            assert untrusted == b""  # closed unanswered
        else:
            assert untrusted.startswith(b"HTTP/1.1 200 OK")
    finally:
        await web.stop()


async def test_the_web_ports_per_address_cap_counts_the_client_a_trusted_proxy_names() -> None:
    """Every connection comes from the proxy's address; the cap (4 here) is per client named."""
    config = WebConfig(host="127.0.0.1", port=0, trusted_proxies=TrustedProxies.parse(PROXY), conns_per_address=4)
    web = WebServer(config, game_port=lambda: 8765)
    await web.start()
    try:
        held = [sent_from(PROXY, web.port, v2("198.51.100.13")) for _ in range(4)]  # idle, counted as .13
        try:

            async def refused() -> bool:
                return (await web_get(web.port, PROXY, v2("198.51.100.13"))).startswith(b"HTTP/1.1 429 ")

            await eventually(refused, what="a fifth connection of 198.51.100.13 refused 429")
            for client in ("198.51.100.14", "2001:db8::1"):  # the proxy's other clients: served
                assert (await web_get(web.port, PROXY, v1(client))).startswith(b"HTTP/1.1 200 OK"), client
            assert (await web_get(web.port, PROXY, b"")).startswith(b"HTTP/1.1 200 OK")  # the proxy's own
        finally:
            for sock in held:
                sock.close()
    finally:
        await web.stop()
