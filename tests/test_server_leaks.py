"""The hidden-card frame scan (docs/rules.md, "Fair play"): record every frame the server sends to each client
during a whole race on a random 64-bit deal, decode each one, and check every card it carries
against what that recipient may see at that moment. No hidden card, no deal number before the
results, no field the protocol does not declare. Test doubles with a deliberately planted leak
must make the same scan fail, so a passing scan means something.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from support import Client, fast_config, make_room, running_server, start_race, view_game

from server.core import ServerCore
from server.core.state import RacerState, RoomState
from shared import protocol as p
from shared.cards import CARD_COUNT
from shared.engine import Game, View

SERVER_STRUCTS: dict[str, type[Any]] = {
    "welcome": p.Welcome, "error": p.Error, "room": p.Room, "room_list": p.RoomList, "left": p.Left,
    "kicked": p.Kicked, "countdown": p.Countdown, "race_start": p.RaceStart, "move_ok": p.MoveOk,
    "move_rejected": p.MoveRejected, "leaderboard": p.Leaderboard, "boards": p.Boards, "results": p.Results,
    "pong": p.Pong, "shutdown": p.Shutdown, "chat": p.ChatSaid, "chat_history": p.ChatHistory,
    "finished": p.Finished,
}  # fmt: skip
VIEW_KEYS = frozenset(View.__struct_fields__)
CARD_KEYS = frozenset({"waste", "reserve_top", "foundations", "tableau"})  # any map with one of these carries cards


def walk(value: object, path: str = "$") -> Iterator[tuple[str, object]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(key, f"{path}.<key>")
            yield from walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from walk(item, f"{path}[{i}]")


def views_in(raw: object) -> list[tuple[str, dict[str, Any]]]:
    return [(path, v) for path, v in walk(raw) if isinstance(v, dict) and set(v) & CARD_KEYS]


def view_cards(view: dict[str, Any]) -> list[int]:
    cards = list(view.get("waste", []))
    if view.get("reserve_top") is not None:
        cards.append(view["reserve_top"])
    for pile in (*view.get("foundations", []), *view.get("tableau", [])):
        cards.extend(pile)
    return cards


def visible(game: Game) -> set[int]:
    """Every card a player of this game has seen: all but the stock and the buried reserve."""
    return set(range(CARD_COUNT)) - set(game.stock) - set(game.reserve[:-1])


@dataclass
class Recipient:
    label: str
    role: str  # racer | spectator
    player_id: str
    frames: list[bytes] = field(default_factory=list)


@dataclass
class ScanReport:
    violations: list[str] = field(default_factory=list)
    frames: int = 0
    views: int = 0
    cards: int = 0


def scan(recipients: list[Recipient], deal: int, records: dict[str, list[str]]) -> ScanReport:
    """Check every recorded frame against what its recipient may see when it arrives."""
    report = ScanReport()
    for who in recipients:
        revealed = False
        moves = records.get(who.player_id, [])
        for index, frame in enumerate(who.frames):
            report.frames += 1
            where = f"{who.label} frame {index}"
            raw = msgpack.unpackb(frame, strict_map_key=False)
            kind = raw.get("type") if isinstance(raw, dict) else None
            if kind not in SERVER_STRUCTS:
                report.violations.append(f"{where}: unknown message {kind!r}")
                continue
            extra = set(raw) - set(SERVER_STRUCTS[kind].__struct_fields__) - {"type"}
            if extra:
                report.violations.append(f"{where}: undeclared fields {sorted(extra)} in {kind}")
            if kind == "results":
                revealed = True
                continue
            if revealed:
                continue  # after the reveal everything may be shown
            for path, value in walk(raw):
                if (isinstance(value, int) and not isinstance(value, bool) and value == deal) or (
                    isinstance(value, str) and str(deal) in value
                ):
                    report.violations.append(f"{where}: the deal number at {path} before the results")
            if kind == "move_ok" and "view" not in raw:
                changes_checked(report, where, raw, deal, moves, who.role)
                continue
            views = views_in(raw)
            if not views:
                continue
            if who.role != p.RACER:
                report.violations.append(f"{where}: a {who.role} got a board ({kind}) before the results")
                continue
            if kind not in ("race_start", "move_ok"):
                report.violations.append(f"{where}: a racer got a board in {kind}")
            seq = raw.get("seq", 0)
            game = Game(deal)
            for move in moves[:seq]:
                game.play(move)
            allowed = visible(game)
            for path, view in views:
                report.views += 1
                cards = view_cards(view)
                report.cards += len(cards)
                hidden = sorted(set(cards) - allowed)
                if hidden:
                    report.violations.append(f"{where}: hidden cards {hidden} at {path} (seq {seq})")
                if set(view) != VIEW_KEYS or len(cards) != len(set(cards)) or view["stock"] != len(game.stock):
                    report.violations.append(f"{where}: the board at {path} is not the racer's (seq {seq})")
    return report


def changes_checked(
    report: ScanReport, where: str, raw: dict[str, Any], deal: int, moves: list[str], role: str
) -> None:
    """A small acknowledgement (docs/protocol.md): its cards are visible to its racer, and they are
    that racer's piles after the move (so never another racer's board)."""
    report.views += 1
    if role != p.RACER:
        report.violations.append(f"{where}: a {role} got a move_ok")
        return
    seq = raw["seq"]
    game = Game(deal)
    for move in moves[:seq]:
        game.play(move)
    allowed = visible(game)
    cards = [card for _name, _keep, pile in raw.get("changes", []) for card in pile]
    reserve = raw.get("reserve")
    if reserve is not None and reserve[1] is not None:
        cards.append(reserve[1])
    report.cards += len(cards)
    hidden = sorted(set(cards) - allowed)
    if hidden:
        report.violations.append(f"{where}: hidden cards {hidden} in move_ok changes (seq {seq})")
    view = game.view()
    piles = {"waste": view.waste}
    piles.update({f"f{i}": f for i, f in enumerate(view.foundations)})
    piles.update({f"t{i}": t for i, t in enumerate(view.tableau)})
    for name, keep, pile in raw.get("changes", []):
        if name not in piles or piles[name][keep:] != pile or len(piles[name]) != keep + len(pile):
            report.violations.append(f"{where}: move_ok change {name} is not the racer's pile (seq {seq})")
    if "stock" in raw and raw["stock"] != view.stock:
        report.violations.append(f"{where}: move_ok stock {raw['stock']} is not the racer's (seq {seq})")


async def race_and_record(core: ServerCore | None, seed: int) -> tuple[ScanReport, p.Results]:
    """A whole race (3 racers, a spectator, one racer reconnecting midway); every frame recorded."""
    rng = random.Random(seed)
    async with running_server(config=fast_config(), core=core) as server:
        racers, code = await make_room(server, ["Ann", "Bob", "Cy"])
        for racer in racers:
            racer.strict = core is None  # a planted leak may give a racer a board that is not its own
        spectator = await Client.open(server, "Spec")
        spectator.strict = core is None
        await spectator.hello("Spec")
        await spectator.send(p.Join(code=code, role="spectator"))
        await spectator.expect(p.Room)
        starts = await start_race([*racers, spectator])
        recipients = {c.label: Recipient(c.label, p.RACER, c.pid) for c in racers}
        recipients["Spec"] = Recipient("Spec", p.SPECTATOR, spectator.pid)
        clients = list(racers)
        views = [s.view for s in starts[:3]]
        next_ids = [1, 1, 1]
        for step in range(90):
            i = step % 3
            view = views[i]
            assert view is not None
            if view.status != "playing":
                continue
            if step == 40:  # Bob drops and resumes with his token
                bob = clients[1]
                token = bob.welcome.token if bob.welcome else ""
                await bob.close()
                recipients["Bob"].frames.extend(bob.frames)
                clients[1] = await Client.open(server, "Bob")
                clients[1].strict = core is None
                await clients[1].hello("Bob", token=token)
                views[1] = (await clients[1].expect(p.RaceStart)).view
                continue
            game = view_game(view)
            legal = game.legal_moves()
            up = [m for m in legal if ">f" in m]
            move = rng.choice(up) if up else ("stock>waste" if game.stock and rng.random() < 0.5 else rng.choice(legal))
            await clients[i].send(p.Move(id=next_ids[i], move=move))
            # A planted leak can put a card on the board that is not really there; a move with
            # it is refused, so wait for either answer. An honest server never refuses here.
            reply: p.ServerMessage = await clients[i].expect((p.MoveOk, p.MoveRejected))  # type: ignore[arg-type]
            if isinstance(reply, p.MoveRejected):
                assert core is not None, f"an honest server refused {move}: {reply.reason}"
            else:
                assert isinstance(reply, p.MoveOk)
                if reply.view is not None or core is None:  # a planted leak may send boards that do not fit
                    views[i] = reply.view
            next_ids[i] += 1
        for i, client in enumerate(clients):
            await client.send(p.Move(id=next_ids[i], move="resign"))
        results = await spectator.expect(p.Results)
        for client in clients:
            await client.expect(p.Results)
            await client.close()
        await spectator.close()
        for client in clients:
            recipients[client.label].frames.extend(client.frames)
        recipients["Spec"].frames.extend(spectator.frames)
    records = {pid: rec.moves for pid, rec in results.records.items()}
    return scan(list(recipients.values()), results.deal, records), results


async def test_no_frame_carries_a_hidden_card_or_the_deal_early() -> None:
    report, results = await race_and_record(None, seed=11)
    assert report.violations == []
    # The scan looked at real content: many frames, many boards, many cards.
    assert report.frames > 100 and report.views > 60 and report.cards > 60
    assert sum(len(rec.moves) for rec in results.records.values()) > 60


# ---------------------------------------------------------------- planted leaks


class PeekCore(ServerCore):
    """Leak: the starting board shows the next stock card on the waste."""

    def _race_start(self, room: RoomState, racer: RacerState | None, now: int) -> p.RaceStart:
        message = super()._race_start(room, racer, now)
        if message.view is not None and racer is not None and racer.game.stock:
            message.view.waste.append(racer.game.stock[-1])
        return message


class ChattyCore(ServerCore):
    """Leak: a debug line with the deal number at the start signal."""

    def _begin(self, room: RoomState, now: int) -> None:
        super()._begin(room, now)
        assert room.race is not None
        self._send(room.member_ids(), p.Error(code="debug", message=f"deal {room.race.record.deal}"))


class ShowBoardsCore(ServerCore):
    """Leak: spectators of a leak-proof room get live boards."""

    def _tick(self, code: str, now: int) -> None:
        super()._tick(code, now)
        room = self.rooms.get(code)
        if room is not None and room.phase == p.RACING and room.race is not None:
            boards = {pid: r.game.view() for pid, r in room.race.racers.items()}
            self._send(room.spectator_ids(), p.Boards(race=1, delay_ms=0, as_of_ms=0, boards=boards))


class CrossedCore(ServerCore):
    """Leak: every racer gets every racer's acknowledgements (and so their boards)."""

    def _send(self, players: tuple[str, ...], message: p.ServerMessage, droppable: bool = False) -> None:
        if isinstance(message, p.MoveOk):
            players = tuple(self.players)
        super()._send(players, message, droppable)


@pytest.mark.parametrize("leaky", [PeekCore, ChattyCore, ShowBoardsCore, CrossedCore])
async def test_a_planted_leak_fails_the_scan(leaky: type[ServerCore]) -> None:
    report, _results = await race_and_record(leaky(fast_config().core), seed=11)
    assert report.violations, f"the scan missed the leak planted by {leaky.__name__}"
