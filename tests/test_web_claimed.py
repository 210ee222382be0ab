"""The spectator page marks claimed names (docs/players.md): in the lobby, the chat and the
leaderboard, in the system's Chromium against a real loopback server; an unclaimed look-alike of
the name never carries the mark."""

from __future__ import annotations

import secrets

from playwright.async_api import Browser, expect
from support import Client, running_server, start_race
from web_helpers import open_page, web_server_for

from shared import protocol as p

expect.set_options(timeout=15_000)


async def test_claimed_names_carry_the_mark_on_the_page(browser: Browser) -> None:
    async with running_server() as server, web_server_for(server) as web:
        secret = secrets.token_urlsafe(32)
        first = await Client.open(server, "Ann")
        await first.hello("someone")
        await first.send(p.Claim(name="Ann", identity=secret))
        await first.expect(p.Claimed)
        await first.close()
        ann = await Client.open(server, "Ann")
        await ann.send(p.Hello(v=p.PROTOCOL_VERSION, name="?", identity=secret))
        ann.welcome = await ann.expect(p.Welcome)
        bob = await Client.open(server, "Bob")
        await bob.hello("Bob")
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        await bob.send(p.Join(code=code))
        await bob.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")
        page = watched.page
        lobby = page.locator("#lobby li")
        await expect(lobby).to_have_count(2)
        await expect(lobby.filter(has_text="Ann").locator(".claimed")).to_have_count(1)
        await expect(lobby.filter(has_text="Bob").locator(".claimed")).to_have_count(0)
        await ann.send(p.Chat(text="from the real Ann"))
        await bob.send(p.Chat(text="from Bob"))
        lines = page.locator("li.chat")
        await expect(lines).to_have_count(2)
        await expect(lines.filter(has_text="from the real Ann").locator(".claimed")).to_have_count(1)
        await expect(lines.filter(has_text="from Bob").locator(".claimed")).to_have_count(0)
        await start_race([ann, bob])
        await expect(page.locator(f'#leaderboard-body tr[data-player="{ann.pid}"] .claimed')).to_have_count(1)
        await expect(page.locator(f'#leaderboard-body tr[data-player="{bob.pid}"] .claimed')).to_have_count(0)
        assert watched.problems == []
        for client in (ann, bob):
            await client.send(p.Move(id=1, move="resign"))
        await expect(page.locator(".claimed").first).to_be_visible()
        await ann.close()
        await bob.close()


async def bound(server: object, name: str) -> Client:
    secret = secrets.token_urlsafe(32)
    first = await Client.open(server, name)  # type: ignore[arg-type]
    await first.hello("someone")
    await first.send(p.Claim(name=name, identity=secret))
    await first.expect(p.Claimed)
    await first.close()
    client = await Client.open(server, name)  # type: ignore[arg-type]
    await client.send(p.Hello(v=p.PROTOCOL_VERSION, name="?", identity=secret))
    client.welcome = await client.expect(p.Welcome)
    return client


async def test_a_rated_races_changes_show_on_the_final_leaderboard(browser: Browser) -> None:
    async with running_server() as server, web_server_for(server) as web:
        ann, bob = await bound(server, "Ann"), await bound(server, "Bob")
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        await bob.send(p.Join(code=code))
        await bob.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")
        page = watched.page
        await expect(page.locator("#lobby li")).to_have_count(2)
        await start_race([ann, bob])
        for client in (ann, bob):
            await client.send(p.Move(id=1, move="resign"))
        results = await ann.expect(p.Results)
        while not results.ratings:
            results = await ann.expect(p.Results)
        for client in (ann, bob):
            change = results.ratings[client.pid]
            shown = f"{change.after.shown} ({'+' if change.change > 0 else ''}{change.change})"
            row = page.locator(f'#leaderboard-body tr[data-player="{client.pid}"] .rating')
            await expect(row).to_have_text(shown)
        assert watched.problems == []
        await ann.close()
        await bob.close()
