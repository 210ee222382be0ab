"""What a connection may make the server send (server/limits.py, AnswerBudgets; docs/reliability.md,
"Amplification"), through the real server and real WebSocket clients: a join/leave loop and a
sync loop are cut off with ``rate_limited``, per connection and per address; moves are never
refused by it and an honest racer keeps its service; what others' moves send a spectator does
not count against it."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from support import Client, eventually, fast_config, make_room, running_server, start_race, toggling_moves

from server.limits import ANSWER_BURST_S, LimitsConfig
from server.testing.shell import DEAL
from shared import protocol as p


def budgets(per_connection: int = 0, per_address: int = 0) -> LimitsConfig:
    return replace(
        LimitsConfig.per_address_off(), answer_bytes_per_s=per_connection, address_answer_bytes_per_s=per_address
    )


async def racing_room(server: object) -> tuple[list[Client], str, str]:
    """Ann and Bob racing in a room with live boards, Ann one move from sending a card home."""
    racers, code = await make_room(server, ["Ann", "Bob"], spectator_boards=0, deal=DEAL)  # type: ignore[arg-type]
    await start_race(racers)
    opening, home = toggling_moves()
    for move_id, move in enumerate(opening, start=1):
        await racers[0].send(p.Move(id=move_id, move=move))
        assert isinstance(await racers[0].expect(p.MoveOk), p.MoveOk)
    return racers, code, home


async def toggle(
    racer: Client, home: str, first_id: int, count: int, pause: float = 0.0
) -> list[p.MoveOk | p.MoveRejected]:
    """``count`` moves, each waited for: the card home, back, home... (the first sends it home)."""
    answers: list[p.MoveOk | p.MoveRejected] = []
    for n in range(count):
        await racer.send(p.Move(id=first_id + n, move=home if n % 2 == 0 else "undo"))
        answers.append(await racer.expect(p.MoveOk | p.MoveRejected))  # type: ignore[arg-type]
        await asyncio.sleep(pause)  # spread over the spectators' ticks, each sending a board
    return answers


async def join_leave_until_refused(watcher: Client, code: str, cycles: int = 400) -> tuple[p.Error, int]:
    """Join as a spectator and leave, again and again, until a join is refused: the refusal and
    the bytes received until then. (Each leave must be answered ``left``: leaving is never refused.)"""
    for _ in range(cycles):
        await watcher.send(p.Join(code=code, role=p.SPECTATOR))
        answer = await watcher.expect(p.Room | p.Error)  # type: ignore[arg-type]
        if isinstance(answer, p.Error):
            return answer, sum(len(frame) for frame in watcher.frames)
        await watcher.send(p.Leave())
        await watcher.expect(p.Left)
    raise AssertionError(f"{cycles} join/leave cycles and no refusal")


async def test_a_join_leave_loop_is_cut_off_and_the_racers_keep_their_service() -> None:
    per_s = 4096
    async with running_server(config=fast_config(limits=budgets(per_connection=per_s))) as server:
        racers, code, home = await racing_room(server)
        watcher = await Client.open(server, "Eve")
        await watcher.hello("Eve")
        moves = asyncio.ensure_future(toggle(racers[0], home, 100, 40))
        refusal, received = await join_leave_until_refused(watcher, code)
        assert refusal.code == p.RATE_LIMITED and refusal.ref == "join"
        assert "retry_ms=" in refusal.message and f"limit {per_s} bytes a second" in refusal.message
        # The budget and one join's answers past it (a snapshot with two live boards), not more.
        assert received < per_s * ANSWER_BURST_S + 8 * 1024, received
        answers = await moves
        assert all(isinstance(a, p.MoveOk) for a in answers), answers  # Ann's moves all played
        # (Every leave was answered left, the ones sent with the budget spent too.) It refills,
        # and the spectator may join again.

        async def joined() -> bool:
            await watcher.send(p.Join(code=code, role=p.SPECTATOR))
            answer = await watcher.expect(p.Room | p.Error)  # type: ignore[arg-type]
            if isinstance(answer, p.Error):
                assert answer.code == p.RATE_LIMITED, answer
                await asyncio.sleep(0.2)
            return isinstance(answer, p.Room)

        await eventually(joined, timeout=30, what="a join once the budget has refilled")


async def test_a_sync_loop_is_cut_off_but_the_racers_moves_are_not() -> None:
    async with running_server(config=fast_config(limits=budgets(per_connection=2048))) as server:
        racers, _code, home = await racing_room(server)
        bob = racers[1]
        syncs = 0
        while True:
            await bob.send(p.Sync())
            answer = await bob.expect(p.RaceStart | p.Error)  # type: ignore[arg-type]
            if isinstance(answer, p.Error):
                break
            syncs += 1
            assert syncs < 200, "no refusal"
        assert answer.code == p.RATE_LIMITED and answer.ref == "sync"
        assert 2 <= syncs <= 2048 * ANSWER_BURST_S // 300, syncs  # each answer is a few hundred bytes
        # Bob's moves are never refused by it (the same deal: his card can go home too), nor Ann's.
        assert all(isinstance(a, p.MoveOk) for a in await toggle(bob, home, 1, 10))
        assert all(isinstance(a, p.MoveOk) for a in await toggle(racers[0], home, 100, 10))


async def test_an_address_budget_cuts_off_its_connections_and_not_another_address() -> None:
    async with running_server(config=fast_config(limits=budgets(per_address=4096))) as server:
        _racers, code, _home = await racing_room(server)
        watchers = [await Client.open(server, f"W{n}", local_addr=("127.0.0.2", 0)) for n in range(4)]
        for n, watcher in enumerate(watchers):
            await watcher.hello(f"W{n}")
        refusals = await asyncio.gather(*(join_leave_until_refused(watcher, code) for watcher in watchers))
        for refusal, _ in refusals:
            assert refusal.code == p.RATE_LIMITED and "your address" in refusal.message
        total = sum(received for _, received in refusals)
        assert total < 4096 * ANSWER_BURST_S + 4 * 8 * 1024, total  # shared: not four budgets
        honest = await Client.open(server, "Hal")  # 127.0.0.1
        await honest.hello("Hal")
        await honest.send(p.Join(code=code, role=p.SPECTATOR))
        assert isinstance(await honest.expect(p.Room | p.Error), p.Room)  # type: ignore[arg-type]


async def test_what_others_moves_send_a_spectator_does_not_spend_its_budget() -> None:
    per_s = 512  # a budget of 4 KiB: the join's snapshot fits
    async with running_server(config=fast_config(limits=budgets(per_connection=per_s))) as server:
        racers, code, home = await racing_room(server)
        watcher = await Client.open(server, "Eve")
        await watcher.hello("Eve")
        await watcher.send(p.Join(code=code, role=p.SPECTATOR))
        await watcher.expect(p.Room)
        joined = sum(len(frame) for frame in watcher.frames)
        answers = await toggle(racers[0], home, 100, 120, pause=0.05)
        assert all(isinstance(a, p.MoveOk) for a in answers)
        await eventually(
            lambda: sum(len(f) for f in watcher.frames) - joined > 3 * per_s * ANSWER_BURST_S,
            what="the racers' moves sent the spectator three times its whole budget",
        )
        # Its budget was charged its own join only (under the burst): its own request is answered.
        await watcher.send(p.ListRooms())
        assert isinstance(await watcher.expect(p.RoomList | p.Error), p.RoomList)  # type: ignore[arg-type]
