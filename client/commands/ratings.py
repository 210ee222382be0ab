"""``plot ratings [NAME]``: a server's rating board (docs/players.md, "Ratings"), or one claimed
name's rating and its rated races, newest first."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="a claimed name: its rating and rated races (default: the board)")
    parser.add_argument("--limit", type=int, default=20, help="rows of the board, 1..100 (default 20)")
    add_server_arguments(parser, name=False)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.connection import Connection, ConnectionFailed
    from client.widgets.plain import clean
    from shared.identity import RATING_BOARD_MAX
    from shared.protocol import NAME_MAX, Error, GetRating, GetRatings, RatingBoard, RatingHistory
    from shared.textwidth import fit_cells

    if not 1 <= args.limit <= RATING_BOARD_MAX:
        print(f"plot ratings: --limit is 1..{RATING_BOARD_MAX}")
        return 2

    async def ask() -> RatingBoard | RatingHistory | Error | str:
        connection = Connection(server_url(args), "ratings")
        try:
            await connection.start()
            if args.name is None:
                return await connection.request(GetRatings(limit=args.limit), RatingBoard)
            return await connection.request(GetRating(name=args.name), RatingHistory)
        except ConnectionFailed as exc:
            return str(exc)
        finally:
            await connection.close()

    reply = asyncio.run(ask())
    if isinstance(reply, str):
        print(f"plot ratings: {reply}")
        return 1
    if isinstance(reply, Error):
        print(f"plot ratings: {clean(reply.message)} ({reply.code})")
        return 1
    if isinstance(reply, RatingBoard):
        if not reply.rows:
            print("no rated races on this server yet")
            return 0
        print(f"{'#':>3} {fit_cells('name', NAME_MAX)} {'rating':>6} {'sure':>5} {'races':>5}")
        for row in reply.rows:
            name = fit_cells(clean(row.name), NAME_MAX)
            print(f"{row.rank:>3} {name} {row.shown:>6} {row.certainty:>4}% {row.races:>5}")
        return 0
    rating = reply.rating
    print(f"{clean(reply.name)} ✓  rating {rating.shown} ({rating.certainty}% sure, {rating.races} rated races)")
    for race in reply.history:
        change = race.after - race.before
        print(f"  room {clean(race.room)} race {race.race}: {race.place} of {race.racers}, {race.after} ({change:+d})")
    return 0
