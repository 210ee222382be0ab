"""The daily pages in a real browser: the system's Chromium driven by Playwright, against a real
loopback server with 10-second days, its JSON API on the web port, and claimed players driven by
the test over WebSockets.

Today's board follows live; when the day is over the page shows it as yesterday's, with the
commitment checked in the browser and every record replayed to its row; a day by number and by
date; a player's page. Every API answer and socket frame the page got before the day ended is
checked for anything of the deal (none), and names are text.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from daily_views_support import claim, daily_config, play_attempt
from playwright.async_api import Browser, Page, Response, WebSocket, expect
from support import running_server, until
from web_helpers import open_page, web_server_for

from server.shell import RaceServer
from server.web.api import DailyApi
from server.web.site import WebServer
from shared import protocol as p
from shared.engine import replay
from shared.fairplay import commitment

DAY_S = 10
XSS_NAME = "<img src=x onerror=f()>"
TIMEOUT_MS = 20_000

expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Seen:
    """Everything the page received, each with the wall-clock second it came."""

    api: list[tuple[float, str, str]] = field(default_factory=list)  # (time, url, body)
    frames: list[tuple[float, bytes]] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        async def on_response(response: Response) -> None:
            if "/api/" in response.url:
                self.api.append((time.time(), response.url, await response.text()))

        def on_frame(payload: str | bytes) -> None:
            self.frames.append((time.time(), payload if isinstance(payload, bytes) else payload.encode()))

        def on_socket(socket: WebSocket) -> None:
            socket.on("framereceived", on_frame)

        page.on("response", on_response)
        page.on("websocket", on_socket)


@pytest.fixture(name="site")
async def daily_site() -> AsyncIterator[tuple[RaceServer, WebServer]]:
    async with (
        running_server(config=daily_config(day_seconds=DAY_S, time_limit_s=60)) as server,
        web_server_for(server) as web,
    ):
        web.api = DailyApi(server.store, day_seconds=DAY_S, ttl_s=0.2)
        yield server, web


async def early_in_a_day() -> None:
    await until(lambda: time.time() % DAY_S < 2.5, "the start of a day", timeout=DAY_S + 5)


async def test_today_live_then_yesterday_revealed_and_verified_in_the_browser(
    browser: Browser, site: tuple[RaceServer, WebServer]
) -> None:
    server, web = site
    base = f"http://127.0.0.1:{web.port}"
    ann = await claim(server, "ann")
    rogue = await claim(server, XSS_NAME)
    await early_in_a_day()
    first = await play_attempt(server, ann, 40)
    seen = Seen()
    watched = await open_page(browser, f"{base}/", prepare=lambda page: _attach(seen, page))
    page = watched.page
    # The front page links today's daily deal.
    await page.locator("#daily-link").click()
    await expect(page).to_have_url(f"{base}/daily")
    today = page.locator("#today")
    await expect(today.locator("tbody tr")).to_have_count(1)
    await expect(page.locator("#today-board-body tr").first.locator("td.name")).to_have_text("ann ✓")
    await expect(page.locator("#conn")).to_have_text("connected: the board follows live")
    await expect(page.locator("#countdown")).to_have_text(re.compile(r"^\d+:\d\d$"))
    day_number = int(await today.get_attribute("data-day") or "-1")
    day_commitment = await today.locator("code.commitment").text_content()
    await expect(page.locator("#play-command")).to_have_text(f"plot daily --server ws://127.0.0.1:{server.port}/")
    assert await page.locator("#today-reveal").count() == 0  # nothing revealed while the day is on

    # Another attempt ends: its row comes live, its name as text.
    second = await play_attempt(server, rogue, 10)
    await expect(page.locator("#today-board-body tr")).to_have_count(2)
    await expect(page.locator(f'#today-board-body tr[data-name="{XSS_NAME}"] td.name')).to_have_text(f"{XSS_NAME} ✓")
    assert await page.locator("#today-board-body img").count() == 0

    # The day ends: the page reads today's and yesterday's boards again; yesterday's is revealed.
    ended = time.time()
    yesterday = page.locator(f'#yesterday[data-day="{day_number}"]')
    await expect(yesterday).to_be_visible(timeout=(DAY_S + 10) * 1000)
    verdict = page.locator("#yesterday-reveal-verdict")
    await expect(verdict).to_have_attribute("data-ok", "true")
    await expect(verdict).to_contain_text("Verified in this browser")
    agree = yesterday.locator("td.agree")
    await expect(agree).to_have_count(2)
    for i in range(2):
        await expect(agree.nth(i)).to_have_attribute("data-ok", "true")
    deal = (await yesterday.locator("code.deal").text_content()) or ""
    salt = (await yesterday.locator("code.salt").text_content()) or ""
    assert commitment(int(deal), salt) == day_commitment
    await expect(page.locator("#today")).to_have_attribute("data-day", str(day_number + 1))

    # Nothing of the deal in any answer or frame the page got before the day ended.
    # (The day before it, over already and revealed, came with its own deal: that one may show.)
    before = [body for at, _url, body in seen.api if at < ended - 0.5]
    assert any(json.loads(body).get("board", {}).get("day") == day_number for body in before)
    for body in before:
        board = json.loads(body).get("board", {})
        if board.get("day") == day_number:
            assert board.get("deal") is None and board.get("salt") is None and board.get("records") is None, body
        assert deal not in body and salt not in body
    frames = [frame for at, frame in seen.frames if at < ended - 0.5]
    assert frames
    for frame in frames:
        message = p.decode_server(frame)
        if isinstance(message, p.DailyBoard) and message.day == day_number:
            assert message.deal is None and message.salt is None and message.records is None
        assert salt.encode() not in frame

    # The records replay to their rows here too (the Python engine), as the page said.
    status, answer = await _api(page, f"{base}/api/daily/{day_number}")
    assert status == 200
    for row in answer["board"]["rows"]:
        _game, result = replay(int(deal), answer["board"]["records"][row["name"]])
        assert result.ok and result.foundation_cards == row["cards"]
    # The standing board (all days), under yesterday's: a resigned attempt's points are its cards home.
    cards = {row["name"]: row["cards"] for row in answer["board"]["rows"]}
    for name in ("ann", XSS_NAME):
        points = page.locator(f'#standing-body tr[data-name="{name}"] td').nth(2)
        await expect(points).to_have_text(str(cards[name]))
    await first.close()
    await second.close()

    # The day by number: the same board, its reveal checked; links to the days around it.
    day_page = await open_page(browser, f"{base}/daily/{day_number}")
    await expect(day_page.page.locator("#day-reveal-verdict")).to_have_attribute("data-ok", "true")
    await expect(day_page.page.locator("#day-board-body tr")).to_have_count(2)
    await expect(day_page.page.locator("#next-day")).to_have_attribute("href", f"/daily/{day_number + 1}")
    await expect(day_page.page.locator("#prev-day")).to_have_attribute("href", f"/daily/{day_number - 1}")
    assert not day_page.problems, day_page.problems
    missing = await open_page(browser, f"{base}/daily/3")
    await expect(missing.page.locator("#problem")).to_have_text("There is no such day on this server.")

    # A player's page, reached from the board's link.
    await page.locator('#yesterday-board-body a[href="/player/ann"]').click()
    await expect(page).to_have_url(f"{base}/player/ann")
    await expect(page.locator("#player-name")).to_have_text("ann ✓")
    await expect(page.locator("#days-played .figure")).to_have_text("1")
    await expect(page.locator(f'#history-body tr[data-day="{day_number}"] a')).to_have_attribute(
        "href", f"/daily/{day_number}"
    )
    rogue_page = await open_page(browser, f"{base}/player/{_quoted(XSS_NAME)}")
    await expect(rogue_page.page.locator("#player-name")).to_have_text(f"{XSS_NAME} ✓")
    nobody = await open_page(browser, f"{base}/player/zed")
    await expect(nobody.page.locator("#problem")).to_have_text("No claimed player zed on this server.")
    assert not rogue_page.problems, rogue_page.problems
    # The API's 404s, which the browser logs (a day with no board: the one before the server's
    # first, the day asked for), and nothing else.
    for watch in (watched, nobody, missing):
        assert all("status of 404" in problem for problem in watch.problems), watch.problems


async def _attach(seen: Seen, page: Page) -> None:
    seen.attach(page)


async def _api(page: Page, url: str) -> tuple[int, Any]:
    response = await page.request.get(url)
    return response.status, json.loads(await response.text())


def _quoted(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


async def test_a_day_by_its_date_with_24_hour_days(browser: Browser) -> None:
    async with running_server(config=daily_config(day_seconds=86400)) as server, web_server_for(server) as web:
        web.api = DailyApi(server.store, day_seconds=86400, ttl_s=0.2)
        ann = await claim(server, "ann")
        first = await play_attempt(server, ann, 20)
        date = time.strftime("%Y-%m-%d", time.gmtime())
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/daily/{date}")
        page = watched.page
        await expect(page.locator("#day-title")).to_have_text(re.compile(r"^Day \d+ \(under way\)$"))
        await expect(page.locator("#day-board-body tr")).to_have_count(1)
        assert await page.locator("#day-reveal").count() == 0
        assert await page.locator("#next-day").count() == 0  # no day after today
        # A phone's width: the page fits it (a wide table scrolls in its own box).
        await page.set_viewport_size({"width": 375, "height": 700})
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        assert not watched.problems, watched.problems
        await first.close()
