"""The spectator page's chat, finish events, pace column and podium in a real browser (the
system's Chromium driven by Playwright, as in tests/test_web_browser.py), against a real loopback
server with racers driven by the test over WebSockets."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect
from support import Client, eventually, make_room, running_server, start_race
from web_helpers import open_page, web_server_for

from shared import protocol as p

XSS_TEXT = "<img src=x onerror=f()>"
TIMEOUT_MS = 15_000

expect.set_options(timeout=TIMEOUT_MS)


def chats(client: Client) -> list[p.ChatLine]:
    return [m.line for m in client.messages if isinstance(m, p.ChatSaid)]


@pytest.mark.parametrize("width", [375, 1280])
async def test_the_page_chats_shows_finish_events_pace_and_the_podium(browser: Browser, width: int) -> None:
    async with running_server() as server, web_server_for(server) as web:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")
        page = watched.page
        await page.set_viewport_size({"width": width, "height": 900})
        await expect(page.locator("#phase")).to_have_text("lobby")
        # A racer's line shows on the page, as text (never markup), under the name the room shows.
        await bob.send(p.Chat(text=f"hi {XSS_TEXT}"))
        line = page.locator("#chat-log li.chat").last
        await expect(line).to_have_text(f"Bob: hi {XSS_TEXT}")
        assert await page.locator("#chat-log img").count() == 0
        # A name the server refuses (only a blank letter): the page says why and watches on.
        await page.fill("#chat-name", "\u3164")
        await page.fill("#chat-input", "hello?")
        await page.click("#chat-form button")
        await expect(page.locator("#chat-problem")).to_contain_text("That name cannot be used")
        await expect(page.locator("#chat-name")).to_have_value("web spectator")
        await expect(page.locator("#conn")).to_have_attribute("data-state", "up")
        await expect(page.locator("#phase")).to_have_text("lobby")
        # The page's person picks a name and says something: the racers get it, as a spectator's.
        await page.fill("#chat-name", "Eve")
        await page.fill("#chat-input", "good luck both")
        await page.click("#chat-form button")
        await eventually(lambda: [c.text for c in chats(ann)][-1:] == ["good luck both"], what="Eve's line at Ann")
        said = chats(ann)[-1]
        assert (said.name, said.role) == ("Eve", p.SPECTATOR)
        await expect(page.locator("#chat-log li.mine")).to_have_text("Eve (watching): good luck both")
        # A line too long is refused with the server's reason, on the page.
        await page.fill("#chat-input", "x" * p.CHAT_MAX)
        await page.evaluate("document.getElementById('chat-input').removeAttribute('maxlength')")
        await page.fill("#chat-input", "y" * (p.CHAT_MAX + 5))
        await page.click("#chat-form button")
        await expect(page.locator("#chat-problem")).to_contain_text(f"at most {p.CHAT_MAX} characters")
        # The race: a spectator's line during it reaches only the spectators.
        await start_race([ann, bob])
        await expect(page.locator("#phase")).to_have_text("racing")
        await page.fill("#chat-input", "psst")
        await page.click("#chat-form button")
        await expect(page.locator("#chat-log li.mine").last).to_contain_text("spectators only")
        await expect(page.locator("#leaderboard th.col-pace")).to_have_count(1)
        # Finish events as they happen.
        await bob.send(p.Move(id=1, move="resign"))
        finish = page.locator("#chat-log li.finish")
        await expect(finish).to_have_count(1)
        await expect(finish).to_contain_text("» Bob resigned at 0:0")
        await expect(finish).to_contain_text("(2nd for now)")
        await ann.send(p.Move(id=1, move="resign"))
        # The podium on the results: 2nd, 1st (the taller step), in that order on the page.
        podium = page.locator("#podium li")
        await expect(podium).to_have_count(2)
        await expect(podium.nth(0)).to_have_class("step place-2")
        await expect(podium.nth(1)).to_contain_text("Ann")
        await expect(podium.nth(1)).to_contain_text("1st")
        first, second = await podium.nth(1).bounding_box(), await podium.nth(0).bounding_box()
        assert first is not None and second is not None and first["height"] > second["height"]
        assert "psst" not in [c.text for c in chats(ann)] + [c.text for c in chats(bob)]
        assert watched.problems == []
        for client in (ann, bob):
            await client.close()
