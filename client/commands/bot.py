"""``plot bot --room CODE``: bot racers that play from their own view (never the deal), at a chosen
level (``--level``: beginner to expert, or a mix) and pace. Each bot's name carries its level.

While they run, each bot's state is printed as a line whenever it changed (checked every
``--every`` seconds: joined, ready, its cards, moves and status in a race, its place at the
end), and each race's result once, as its ranking; no screen is taken over.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from client.commands._race_args import add_level_argument, add_server_arguments, room_code, server_url
from client.words import ordinal, plural

if TYPE_CHECKING:
    from client.bot import Bot
    from shared.protocol import Results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--room", type=room_code, required=True, help="the room to race in")
    add_server_arguments(parser, name=False)
    parser.add_argument("--name", default="bot", help="the bot's name (several get -1, -2, …)")
    add_level_argument(parser)
    parser.add_argument(
        "--speed", type=float, default=None, metavar="MOVES_PER_S", help="moves per second (default: the level's)"
    )
    parser.add_argument("--count", type=int, default=1, help="how many bots (default 1)")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="make the bots' choices and paces repeatable: bot i plays from seed SEED+i (default: random)",
    )
    parser.add_argument("--races", type=int, default=None, help="leave after this many races (default: stay)")
    parser.add_argument(
        "--every", type=float, default=1.0, metavar="SECONDS", help="how often progress is printed (default 1)"
    )


def bot_status(bot: Bot) -> str:
    """One line: where the bot is and how its race goes."""
    model = bot.model
    room = model.room
    if room is None:
        return f"{bot.name}: {model.left_reason or 'joining room ' + bot.code}"
    race = f"race {room.race}"
    if room.phase in ("lobby", "dealing", "countdown"):
        me = model.me
        state = "ready" if me is not None and me.ready else "not ready"
        return f"{bot.name}: room {room.code}, {race}: {room.phase}, {state}"
    view = model.view
    if model.results is not None:
        results = model.results
        row = next((r for r in results.racers if r.player_id == model.player_id), None)
        if row is None:
            return f"{bot.name}: {race} over"
        place = results.ranking.index(row.player_id) + 1 if row.player_id in results.ranking else row.rank
        placed = f"placed {ordinal(place)} of {len(results.ranking)}"
        return f"{bot.name}: {race} over: {placed}, {row.status}, {row.cards}/104 home"
    if view is None:
        return f"{bot.name}: {race}: {room.phase}"
    # This race's entries, as the server counts them (its log's length): the results say the same.
    moves = plural(max(model.seq, 0), "move")
    return f"{bot.name}: {race}: {view.foundation_cards}/104 home, {moves}, {view.status}"


def results_lines(results: Results) -> list[str]:
    from client.widgets.leaderboard import clock

    lines = [f"race {results.race} result (deal {results.deal}):"]
    for place, row in enumerate(results.racers, start=1):
        bot = " (bot)" if row.bot else ""
        lines.append(f"  {place}. {row.name}{bot}: {row.status}, {row.cards}/104 home, {clock(row.elapsed_ms)}")
    return lines


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.bot import Bot
    from client.bot_levels import bot_name, level_named
    from client.connection import ConnectionFailed
    from shared.protocol import check_name

    if args.count < 1 or (args.speed is not None and args.speed <= 0) or args.every <= 0:
        print("plot bot: --count must be at least 1, --speed and --every above 0")
        return 2
    levels = [level_named(args.level[i % len(args.level)]) for i in range(args.count)]
    bases = [args.name] if args.count == 1 else [f"{args.name}-{i}" for i in range(1, args.count + 1)]
    names = [bot_name(base, level) for base, level in zip(bases, levels, strict=True)]
    for name in names:
        problem = check_name(name)
        if problem:
            print(f"plot bot: the bot name {name!r} (--name with the level beside it) will not do: {problem}")
            return 2

    last: dict[str, str] = {}
    shown: set[int] = set()

    def report(bots: list[Bot]) -> None:
        """Print each bot's line that changed, and each race's result once."""
        for bot in bots:
            line = bot_status(bot)
            if last.get(bot.name) != line:
                last[bot.name] = line
                print(line, flush=True)
        for bot in bots:
            results = bot.last_results
            if results is not None and results.race not in shown:
                shown.add(results.race)
                print("\n".join(results_lines(results)), flush=True)

    async def reporter(bots: list[Bot]) -> None:
        while True:
            report(bots)
            await asyncio.sleep(args.every)

    async def race() -> int:
        bots = [
            Bot(
                server_url(args),
                args.room,
                name=name,
                speed=args.speed,
                level=level,
                seed=None if args.seed is None else args.seed + i,
                races=args.races,
            )
            for i, (name, level) in enumerate(zip(names, levels, strict=True))
        ]
        printing = asyncio.create_task(reporter(bots))
        try:
            outcomes = await asyncio.gather(*(bot.run() for bot in bots), return_exceptions=True)
        finally:
            printing.cancel()
        report(bots)
        code = 0
        for bot, outcome in zip(bots, outcomes, strict=True):
            if isinstance(outcome, ConnectionFailed):
                print(f"{bot.name}: {outcome}")
                code = 1
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                print(f"{bot.name}: {plural(bot.moves_played, 'move')} played")
        return code

    try:
        return asyncio.run(race())
    except KeyboardInterrupt:
        return 130
