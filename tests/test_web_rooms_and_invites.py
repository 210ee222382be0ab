"""The spectator page's room list on a phone, its "join this race" line, the one state of a room
that does not exist, and closed pages no longer counted as spectators: the system's Chromium
(Playwright) against a real loopback server, at 375 px (a phone) and 1280 px (a desktop)."""

from __future__ import annotations

import shlex

import pytest
from playwright.async_api import Browser, expect
from support import Client, make_room, running_server
from web_helpers import open_page, until, web_server_for

from client.commands._race_args import room_target
from shared import protocol as p

TIMEOUT_MS = 15_000
expect.set_options(timeout=TIMEOUT_MS)
WIDTHS = (375, 1280)


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_room_list_keeps_its_rules_readable(browser: Browser, width: int) -> None:
    async with running_server() as server, web_server_for(server) as web:
        clients, code = await make_room(server, ["Annabelle-the-host", "Bob"], time_limit=600, undo=False)
        page = (await open_page(browser, f"http://127.0.0.1:{web.port}/")).page
        await page.set_viewport_size({"width": width, "height": 800})
        row = page.locator(f'#rooms-body tr[data-code="{code}"]')
        await expect(row.locator("td.rules")).to_contain_text("undo off")
        sizes = await row.evaluate(
            """row => {
                const rules = row.querySelector('td.rules').getBoundingClientRect();
                const table = document.getElementById('rooms').getBoundingClientRect();
                const line = parseFloat(getComputedStyle(row.querySelector('td.rules')).lineHeight);
                return {rules: rules.width, table: table.width, rulesHeight: rules.height,
                        height: row.getBoundingClientRect().height, line, page: document.documentElement.scrollWidth};
            }"""
        )
        assert sizes["page"] <= width  # nothing runs off the side of the screen
        # The rules take at least half the table's width (two lines at most), the row a few lines.
        assert sizes["rules"] >= sizes["table"] / 2, sizes
        assert sizes["rulesHeight"] <= 3 * sizes["line"], sizes
        assert sizes["height"] <= 7 * sizes["line"], sizes
        for client in clients:
            await client.close()


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_lobby_page_shows_the_exact_join_command(browser: Browser, width: int) -> None:
    async with running_server() as server, web_server_for(server) as web:
        clients, code = await make_room(server, ["Ann"])
        page = (await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")).page
        await page.set_viewport_size({"width": width, "height": 800})
        invite = page.locator("#invite")
        await expect(invite).to_be_visible()
        command = await page.locator("#invite-command").inner_text()
        # The command is what plot takes: the invite names this server and this room.
        plot, verb, link = shlex.split(command)
        assert (plot, verb) == ("plot", "join")
        target = room_target(link)
        assert target.code == code and target.server == f"ws://127.0.0.1:{server.port}"
        box = await invite.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
        # Once the race is on, nobody can join it: the line goes.
        bob = await Client.open(server, "Bob")
        await bob.hello("Bob")
        await bob.send(p.Join(code=code))
        await bob.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        await clients[0].send(p.Ready(ready=True))
        await expect(page.locator("#lobby li")).to_have_count(2)
        await clients[0].send(p.Start())
        await expect(page.locator("#phase")).not_to_have_text("lobby")
        await expect(invite).to_be_hidden()
        for client in (*clients, bob):
            await client.close()


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_room_that_does_not_exist_is_one_state_with_a_way_back(browser: Browser, width: int) -> None:
    async with running_server() as server, web_server_for(server) as web:
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/ZZZZZ")
        page = watched.page
        await page.set_viewport_size({"width": width, "height": 800})
        await expect(page.locator("#problem")).to_contain_text("There is no room ZZZZZ on this server")
        main = page.locator("main")
        await expect(main).not_to_contain_text("Joining the room")
        await expect(page.locator("#phase")).to_have_count(0)  # no JOINING badge
        await expect(page.locator("#conn")).to_have_text("not watching")
        await expect(page).to_have_title("No room ZZZZZ · The Plot race")
        await page.click("#back")
        await expect(page).to_have_url(f"http://127.0.0.1:{web.port}/")
        await expect(page.locator("#rooms")).to_be_visible()
        assert watched.problems == []


async def test_closed_pages_stop_counting_as_spectators_at_once(browser: Browser) -> None:
    async with running_server() as server, web_server_for(server) as web:
        clients, code = await make_room(server, ["Ann"])
        host = clients[0]
        pages = [await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}") for _ in range(5)]
        for watched in pages:
            await expect(watched.page.locator("#spectators")).to_have_text("5 watching")
        for watched in pages[:4]:
            await watched.page.close()
        # Well inside the lobby grace of a racer (minutes): the count is back to the one open page.
        await expect(pages[4].page.locator("#spectators")).to_have_text("1 watching")

        async def host_sees_one() -> bool:
            await host.send(p.ListRooms())
            listing = await host.expect(p.RoomList)
            return [r.spectators for r in listing.rooms if r.code == code] == [1]

        await until(host_sees_one, "the room list counting the one open page")
        await host.close()
