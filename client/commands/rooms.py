"""``plot rooms``: the open rooms on a server (private rooms are never listed)."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, server_url
from client.words import plot_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser, name=False)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.connection import Connection, ConnectionFailed
    from client.widgets.plain import clean
    from shared.protocol import NAME_MAX, Error, ListRooms, RoomList
    from shared.textwidth import fit_cells

    async def fetch() -> RoomList | str:
        connection = Connection(server_url(args), "lister")
        try:
            await connection.start()
            reply = await connection.request(ListRooms(), RoomList)
        except ConnectionFailed as exc:
            return str(exc)
        finally:
            await connection.close()
        if isinstance(reply, Error):
            return f"the server refused: {reply.message}"
        return reply

    result = asyncio.run(fetch())
    if isinstance(result, str):
        print(f"plot rooms: {result}")
        return 1
    if not result.rooms:
        print(f"no open rooms: start one with  {plot_command()} host")
        return 0
    print(f"{'code':<6} {fit_cells('host', NAME_MAX)} {'phase':<9} {'racers':>7} {'watching':>8}  notes")
    for room in result.rooms:
        notes = []
        if room.chosen_deal:
            notes.append("chosen deal")
        if not room.leak_proof:
            notes.append("live boards")
        if not room.undo:
            notes.append("no undo")
        if room.time_limit:
            notes.append(f"{room.time_limit}s limit")
        if not room.bots_allowed:
            notes.append("no bots")
        if room.winnable_only:
            notes.append("winnable only")
        racers = f"{room.racers}/{room.max_racers}"
        host = fit_cells(clean(room.host_name), NAME_MAX)  # by terminal cells: a wide character takes 2
        phase = clean(room.phase)
        print(f"{clean(room.code):<6} {host} {phase:<9} {racers:>7} {room.spectators:>8}  {', '.join(notes)}")
    plot = plot_command()
    print(f"join one with  {plot} join CODE   or watch with  {plot} watch CODE")
    return 0
