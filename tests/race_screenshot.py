"""Take docs/race.svg: the terminal client racing three bots of mixed levels.

    .venv/bin/python tests/race_screenshot.py [OUT_DIR]

``plot practice`` as a person runs it (a server inside the process, the bots beside the
player), driven headless through Textual's ``run_test`` at 160x40, where the leaderboard stands
beside the board; the picture is taken once every bot has sent a few cards home.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from support import until

from client.tui.practice import embedded_server, practice_config
from client.tui.race import RaceApp
from shared import protocol as p

SIZE = (160, 40)
CARDS_HOME = 20  # each bot's, when the picture is taken


async def take(out_dir: Path) -> Path:
    async with embedded_server(countdown_ms=100) as server_url:
        config = practice_config(
            server_url, name="you", bots=3, deal=4242, speed=None, levels=("easy", "medium", "hard")
        )
        app = RaceApp(config)
        async with app.run_test(size=SIZE) as pilot:

            def bots_under_way() -> bool:
                board = app.model.leaderboard
                return (
                    app.model.phase == p.RACING
                    and board is not None
                    and all(row.cards >= CARDS_HOME for row in board.racers if row.bot)
                )

            await until(bots_under_way, "the bots under way", 120)
            await pilot.pause()
            path = out_dir / "race.svg"
            app.save_screenshot(filename=path.name, path=str(out_dir))
            await app.shutdown()
    return path


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs"
    print(asyncio.run(take(folder)))
