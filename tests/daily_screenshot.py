"""Take docs/daily.png (the /daily page) and docs/daily.svg (``plot daily`` after an attempt).

    .venv/bin/python tests/daily_screenshot.py [OUT_DIR]

A real server with 20-second days (so that yesterday is over and revealed within the run) and its
page server on loopback; claimed players play their attempts over WebSockets: four yesterday,
three today. The page is photographed in the system's Chromium once yesterday's reveal is
verified; the terminal client (``plot daily`` as a person runs it, through Textual's
``run_test``) once its attempt is over and the day's board shows.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from daily_views_support import claim, daily_config, keep_identities, play_attempt
from playwright.async_api import async_playwright, expect
from support import running_server, until, url
from web_helpers import find_chromium, web_server_for

from client.tui.daily import DAILY, DailyApp, DailyConfig
from client.tui.race import RaceConfig
from server.web.api import DailyApi

DAY_S = 20
YESTERDAY = {"Ann": 160, "Bob": 90, "Chiara": 60, "Dmitri": 30}
TODAY = {"Ann": 120, "Chiara": 80}
PACE_S = 0.06  # between a player's moves: the boards' times look like people's


async def main(out_dir: Path) -> None:
    import os
    import tempfile

    os.environ["PLOT_STATE_DIR"] = tempfile.mkdtemp(prefix="plot-shot-")
    async with (
        running_server(config=daily_config(day_seconds=DAY_S, time_limit_s=600)) as server,
        web_server_for(server) as web,
    ):
        web.api = DailyApi(server.store, day_seconds=DAY_S, ttl_s=0.2)
        names = {name: await claim(server, name) for name in {*YESTERDAY, *TODAY, "Bob"}}
        await until(lambda: time.time() % DAY_S < 3, "the start of a day", timeout=DAY_S + 5)
        first = int(time.time() // DAY_S)
        clients = list(
            await asyncio.gather(*(play_attempt(server, names[n], m, pace_s=PACE_S) for n, m in YESTERDAY.items()))
        )
        await until(lambda: time.time() // DAY_S > first, "the next day", timeout=DAY_S + 5)
        clients += await asyncio.gather(*(play_attempt(server, names[n], m, pace_s=PACE_S) for n, m in TODAY.items()))

        # The terminal: Bob's attempt of today, played and resigned, then the day's board.
        keep_identities(url(server), names["Bob"])
        config = RaceConfig(url=url(server), name="Bob", mode=DAILY, profile="daily", title="daily deal")
        app = DailyApp(config, DailyConfig(page_url=f"http://127.0.0.1:{web.port}"))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(lambda: app.model.view is not None, "Bob's board")
            for key in ["space", "space", "space"]:
                await pilot.press(key)
            await pilot.press("R")
            await pilot.pause()
            await pilot.press("y")
            await until(lambda: app.board is not None and app.board.total == 3 and app.copied, "the day's board")
            await pilot.pause()
            app.save_screenshot(filename="daily.svg", path=str(out_dir))
            await app.shutdown()

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=find_chromium())
            page = await browser.new_page(viewport={"width": 1100, "height": 1100}, device_scale_factor=1)
            await page.goto(f"http://127.0.0.1:{web.port}/daily")
            await expect(page.locator("#yesterday-reveal-verdict")).to_have_attribute("data-ok", "true")
            await expect(page.locator("#today-board-body tr")).to_have_count(3)
            await expect(page.locator("#yesterday td.agree[data-ok=true]")).to_have_count(len(YESTERDAY))
            await page.screenshot(path=str(out_dir / "daily.png"), full_page=True)
            await browser.close()
        for client in clients:
            await client.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs"))
