"""How soon a move shows on the spectator page: from the racer's ``move_ok`` to the page's
leaderboard row showing it, in the system's Chromium.

    .venv/bin/python bench/web_latency.py [--moves 200] [--pace 5] [--spectators 1] [--spectator-hz 5]

A real server (memory store, the default leaderboard rates: racers ~10 Hz, spectators
``--spectator-hz``) and page server on loopback; one racer plays the bot's moves on deal 8 (a
win in 213 moves) at ``--pace`` moves per second; ``--spectators`` pages watch. The moves timed
are those that send a card home: a spectator's leaderboard row is sent when its cards, status or
rank change, and its ``moves`` figure is refreshed only with them or the whole leaderboard (every
5 s). Each page records, with a MutationObserver, the wall-clock time its row first shows at
least c cards; the racer records when the ``move_ok`` that brought the c-th card home arrived.
The latency is the difference (same machine, same clock). Also: how long the watch page takes
from navigation to its first leaderboard row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import cpu_name
from playwright.async_api import Page, async_playwright, expect
from support import board, make_room, running_server, start_race  # test helpers, through the path above
from web_helpers import find_chromium, web_server_for

from client.bot import choose_move
from server.core import CoreConfig
from server.shell import ServerConfig
from shared import protocol as p

RESULTS = Path(__file__).resolve().parent / "results"
OBSERVE = """playerId => {
    window.__seen = {};
    const record = () => {
        const row = document.querySelector(`#leaderboard-body tr[data-player="${playerId}"]`);
        if (!row) return;
        const cards = Number(row.querySelector('.count').textContent);
        const now = performance.timeOrigin + performance.now();
        for (let c = 1; c <= cards; c++) if (!(c in window.__seen)) window.__seen[c] = now;
    };
    new MutationObserver(record).observe(document.body, { subtree: true, childList: true, characterData: true });
    record();
}"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(moves: int, pace: float, spectators: int, spectator_hz: float) -> dict[str, object]:
    core = CoreConfig(countdown_ms=500, spectator_leaderboard_interval_ms=round(1000 / spectator_hz))
    config = ServerConfig(host="127.0.0.1", port=0, core=core)
    async with running_server(config=config) as server, web_server_for(server) as web:
        racers, code = await make_room(server, ["Ann", "Bob"], deal=8)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=find_chromium())
            pages: list[Page] = []
            load_ms: list[float] = []
            for _ in range(spectators):
                page = await browser.new_page()
                await page.goto(f"http://127.0.0.1:{web.port}/watch/{code}")
                await expect(page.locator("#phase")).to_have_text("lobby", timeout=20_000)
                pages.append(page)
            starts = await start_race(racers)
            ann = racers[0]
            for page in pages:
                await expect(page.locator("#leaderboard-body tr")).to_have_count(2, timeout=20_000)
                await page.evaluate(OBSERVE, ann.pid)
            view = starts[0].view
            assert view is not None
            acked: dict[int, float] = {}  # cards home -> when the move_ok that brought the last of them came
            played = 0
            for k in range(1, moves + 1):
                move = choose_move(view)
                if move is None or move == "resign":
                    break
                began = time.monotonic()
                before = view.foundation_cards
                await ann.send(p.Move(id=k, move=move))
                view = board(await ann.expect(p.MoveOk))
                played += 1
                for cards in range(before + 1, view.foundation_cards + 1):
                    acked[cards] = time.time() * 1000
                await asyncio.sleep(max(0.0, 1 / pace - (time.monotonic() - began)))
            last = max(acked)
            for page in pages:
                await page.wait_for_function(f"() => window.__seen && window.__seen[{last}]", timeout=20_000)
            latencies: list[float] = []
            for page in pages:
                seen: dict[str, float] = await page.evaluate("window.__seen")
                latencies += [seen[str(k)] - t for k, t in acked.items()]
            # A fresh page: navigation to its first leaderboard row, mid-race.
            for _ in range(5):
                page = await browser.new_page()
                began = time.monotonic()
                await page.goto(f"http://127.0.0.1:{web.port}/watch/{code}")
                await expect(page.locator("#leaderboard-body tr")).to_have_count(2, timeout=20_000)
                load_ms.append((time.monotonic() - began) * 1000)
                await page.close()
            await browser.close()
        for client in racers:
            await client.close()
    return {
        "moves": played,
        "timed_moves": len(acked),  # the moves that sent a card home
        "pace_per_s": pace,
        "spectators": spectators,
        "spectator_hz": spectator_hz,
        "latency_ms": {
            "p50": statistics.median(latencies),
            "p90": percentile(latencies, 0.9),
            "p99": percentile(latencies, 0.99),
            "max": max(latencies),
            "min": min(latencies),
        },
        "first_row_ms": {"median": statistics.median(load_ms), "max": max(load_ms)},
        "machine": f"{cpu_name()}, {platform.system()} {platform.release()}, Python {platform.python_version()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moves", type=int, default=200)
    parser.add_argument("--pace", type=float, default=5.0, help="moves per second")
    parser.add_argument("--spectators", type=int, default=1, help="pages watching")
    parser.add_argument(
        "--spectator-hz",
        type=float,
        default=1000 / CoreConfig().spectator_leaderboard_interval_ms,
        help="the server's leaderboards per second to spectators (plot-server --spectator-hz)",
    )
    parser.add_argument("--save", action="store_true", help="write bench/results/web-latency-<time>.json")
    args = parser.parse_args()
    result = asyncio.run(run(args.moves, args.pace, args.spectators, args.spectator_hz))
    print(json.dumps(result, indent=2))
    if args.save:
        path = RESULTS / time.strftime("web-latency-%Y%m%d-%H%M%S.json", time.gmtime())
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"saved {path}")


if __name__ == "__main__":
    main()
