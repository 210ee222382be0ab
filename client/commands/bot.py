"""``plot bot --room CODE``: bot racers that play from their own view (never the deal), at a chosen pace."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, room_code, server_url
from client.words import plural


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--room", type=room_code, required=True, help="the room to race in")
    add_server_arguments(parser, name=False)
    parser.add_argument("--name", default="bot", help="the bot's name (several get -1, -2, …)")
    parser.add_argument("--speed", type=float, default=2.0, metavar="MOVES_PER_S", help="moves per second (default 2)")
    parser.add_argument("--count", type=int, default=1, help="how many bots (default 1)")
    parser.add_argument("--races", type=int, default=None, help="leave after this many races (default: stay)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.bot import Bot
    from client.connection import ConnectionFailed

    if args.count < 1 or args.speed <= 0:
        print("plot bot: --count must be at least 1 and --speed above 0")
        return 2
    names = [args.name] if args.count == 1 else [f"{args.name}-{i}" for i in range(1, args.count + 1)]

    async def race() -> int:
        bots = [Bot(server_url(args), args.room, name=n, speed=args.speed, races=args.races) for n in names]
        outcomes = await asyncio.gather(*(bot.run() for bot in bots), return_exceptions=True)
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
