"""Take docs/watch.png (and docs/watch-phone.png): the spectator page during a real race.

    .venv/bin/python tests/web_screenshot.py [OUT_DIR]

A real server and page server on loopback, four racers playing the bot's moves at different
paces over WebSockets, and the system's Chromium (as in the browser tests) photographing the
room's page mid-race, at a desktop's width and at a phone's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from playwright.async_api import async_playwright, expect
from support import Client, board, make_room, running_server, start_race
from web_helpers import find_chromium, web_server_for

from client.bot import choose_move
from shared import protocol as p
from shared.engine import View

NAMES = ["Ann", "Bob", "Chiara", "Dmitri"]
MOVES = [70, 52, 38, 24]  # entries each racer has played when the picture is taken


async def play(client: Client, view: View, moves: int) -> None:
    for move_id in range(1, moves + 1):
        move = choose_move(view)
        if move is None or move == "resign":
            return
        await client.send(p.Move(id=move_id, move=move))
        view = board(await client.expect(p.MoveOk))
        await asyncio.sleep(0.12)  # a human-looking pace: the race clock moves on


async def main(out_dir: Path) -> None:
    async with running_server() as server, web_server_for(server) as web:
        racers, code = await make_room(server, NAMES, time_limit=900)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=find_chromium())
            page = await browser.new_page(viewport={"width": 1200, "height": 540}, device_scale_factor=1)
            await page.goto(f"http://127.0.0.1:{web.port}/watch/{code}")
            await expect(page.locator("#phase")).to_have_text("lobby")
            starts = await start_race(racers)
            await asyncio.gather(
                *(play(c, s.view, n) for c, s, n in zip(racers, starts, MOVES, strict=True) if s.view is not None)
            )
            await expect(page.locator("#leaderboard-body tr")).to_have_count(len(NAMES))
            await page.wait_for_function(  # every bar drawn at its final width (the bars animate)
                "() => [...document.querySelectorAll('.bar-fill')].every(f => !f.getAnimations().length)"
            )
            await page.screenshot(path=str(out_dir / "watch.png"))
            await page.set_viewport_size({"width": 390, "height": 760})
            await page.wait_for_function(
                "() => [...document.querySelectorAll('.bar-fill')].every(f => !f.getAnimations().length)"
            )
            await page.screenshot(path=str(out_dir / "watch-phone.png"))
            await browser.close()
        for client in racers:
            await client.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs"))
