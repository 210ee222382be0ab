"""Clients behind HAProxy keep their own per-address budgets (docs/reliability.md, "Clients behind a
balancer"): a real ``plot-server`` process and a real HAProxy with deploy/haproxy.cfg on loopback
(tests/haproxy_fixture.py; both of its node names are the one node here, so every connection
reaches the same budgets). Clients come from other loopback addresses (127.0.0.2, 127.0.0.3);
HAProxy reaches the node from 127.0.0.1.

Without the PROXY protocol the node sees every client at HAProxy's address: one client's failed
joins lock every other client out. With the shipped config (``send-proxy-v2``) and the node
trusting HAProxy's address, each client spends its own budget."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from haproxy_fixture import LocalHAProxy
from redis_fixture import free_port
from support import Client, eventually, log_lines, server_process, wait_healthy
from websockets.exceptions import InvalidStatus

from shared import protocol as p

BUDGET = 3  # --join-failures-per-minute


@asynccontextmanager
async def behind_haproxy(
    trusted: str | None, proxy_protocol: bool, wait_up: bool = True
) -> AsyncIterator[tuple[LocalHAProxy, subprocess.Popen[str], int]]:
    """One node (``--trusted-proxy trusted`` unless None) behind HAProxy (``send-proxy-v2`` as shipped
    unless ``proxy_protocol`` is False); yields HAProxy (once it sees the node up, if ``wait_up``),
    the node's process and its game port."""
    game, web = free_port(), free_port()
    args = ["--port", str(game), "--web-port", str(web), "--log-level", "warning", "--join-failures-per-minute",
            str(BUDGET), "--hellos-per-minute", "0", "--max-conns-per-address", "0"]  # fmt: skip
    if trusted is not None:
        args += ["--trusted-proxy", trusted]
    with server_process(*args) as node:
        await asyncio.to_thread(wait_healthy, node, game)
        nodes, pages = {"server-a": game, "server-b": game}, {"server-a": web, "server-b": web}
        with LocalHAProxy(nodes, pages, (free_port(), free_port()), proxy_protocol=proxy_protocol) as proxy:
            if wait_up:
                await asyncio.to_thread(proxy.wait_up)
            yield proxy, node, game


async def racer(url: str, name: str, source: str) -> Client:
    client = await Client.open(url, name, local_addr=(source, 0))
    await client.hello(name)
    return client


async def lock_out_attempt(proxy: LocalHAProxy) -> tuple[p.Error, p.Room | p.Error]:
    """A host opens a room (127.0.0.3); a guesser spends its failed joins (127.0.0.2), then one
    more; an honest client (127.0.0.1) joins the room. The guesser's last answer, the honest one's."""
    url = proxy.game_url
    host = await racer(url, "Host", "127.0.0.3")
    await host.send(p.CreateRoom())
    code = (await host.expect(p.Room)).code
    guesser = await racer(url, "Guess", "127.0.0.2")
    for _ in range(BUDGET):
        await guesser.send(p.Join(code="22222"))
        assert (await guesser.expect(p.Error)).code == p.UNKNOWN_ROOM
    await guesser.send(p.Join(code=code))
    spent = await guesser.expect(p.Error)
    honest = await racer(url, "Honest", "127.0.0.1")
    await honest.send(p.Join(code=code))
    answer: p.Room | p.Error = await honest.expect(p.Room | p.Error)  # type: ignore[arg-type]
    for client in (host, guesser, honest):
        await client.close()
    return spent, answer


async def test_without_the_proxy_protocol_one_clients_bad_joins_lock_out_everyone() -> None:
    async with behind_haproxy(trusted=None, proxy_protocol=False) as (proxy, _node, _port):
        spent, honest = await lock_out_attempt(proxy)
        assert spent.code == p.RATE_LIMITED
        assert isinstance(honest, p.Error) and honest.code == p.RATE_LIMITED, honest  # HAProxy's one budget


async def test_with_the_shipped_config_each_client_behind_haproxy_spends_its_own_budget() -> None:
    async with behind_haproxy(trusted="127.0.0.1", proxy_protocol=True) as (proxy, _node, _port):
        spent, honest = await lock_out_attempt(proxy)
        assert spent.code == p.RATE_LIMITED
        assert isinstance(honest, p.Room), honest
        # The spectator page through HAProxy too: its PROXY header read, the page served.
        page = await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{proxy.listen[1]}/", timeout=5)
        assert page.status == 200 and b"<html" in page.read()


async def test_a_proxy_header_from_an_address_the_node_does_not_trust_is_refused() -> None:
    # HAProxy sends its headers (its checks' too) to a node that trusts another address: the node
    # refuses every one, so HAProxy holds it down and no client gets through under any address.
    async with behind_haproxy(trusted="10.0.0.0/8", proxy_protocol=True, wait_up=False) as (proxy, node, _port):
        await eventually(
            lambda: {status for status in proxy.server_states().values()} == {"DOWN"}, 15, what="the node held down"
        )
        with pytest.raises(InvalidStatus) as refused:
            await Client.open(proxy.game_url, "refused", open_timeout=5)
        assert refused.value.response.status_code == 503
        node.terminate()
        await asyncio.to_thread(node.wait, 10)
        refused_headers = [line for line in log_lines(node) if line.get("event") == "proxy_header_refused"]
        assert refused_headers and refused_headers[0]["peer"] == "127.0.0.1", refused_headers


async def test_a_client_sending_its_own_proxy_header_to_the_node_gets_no_spoofed_address() -> None:
    async with behind_haproxy(trusted="127.0.0.1", proxy_protocol=True) as (_proxy, _node, port):
        spoofed: Callable[[], bytes] = lambda: b"PROXY TCP4 198.51.100.1 127.0.0.1 40000 8765\r\n"  # noqa: E731
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        writer.write(spoofed() + b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")  # fmt: skip
        try:
            answer = await asyncio.wait_for(reader.read(), 10)
        except ConnectionError:
            answer = b""
        writer.close()
        assert answer == b""  # closed unanswered: no upgrade under the claimed address
