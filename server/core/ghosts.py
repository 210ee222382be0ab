"""Ghosts (docs/ghosts.md): recorded games of the room's deal racing beside the live racers.

A ghost is a :class:`GhostRecord` in the room record (the next race's ghosts) and in the race
record (this race's), so any node rebuilds it. Its progress is a function of the race's clock:
the room's leaderboard due (deadlines.py) is the slot edge at or after its next entry, and that
leaderboard tick plays the entries whose time has come on the ghost's game (the engine's) before
it ranks the rows: one shared tick for every ghost of the node, never a wake-up per entry. Nothing of it is
ever written while the race runs. What others see of it is what a live racer's row shows (cards
home, moves, status, time), marked ``ghost``; its board only where a live racer's board would be
shown (spectators' delayed boards, the results).
"""

from __future__ import annotations

import contextlib
import itertools

from server.core.base import CoreBase
from server.core.records import GhostRecord
from server.core.state import GhostState, RaceState, RoomState
from shared import protocol as p
from shared.engine import PLAYING, WON, Game, IllegalMove, View
from shared.names import NameInvalid, display_name

RankKey = tuple[int, int, int, int]


def ghost_game(record: GhostRecord, deal: int) -> Game:
    return Game(deal, undo=record.undo, blocked_budget=None)


def advance_ghost(ghost: GhostState, race_ms: int) -> bool:
    """Play the ghost's entries whose time is at or before ``race_ms``; True if any was."""
    moved = False
    times, moves, game = ghost.record.times, ghost.record.moves, ghost.game
    while ghost.shown < len(times) and times[ghost.shown] <= race_ms:
        before = game.foundation_cards
        with contextlib.suppress(IllegalMove):  # cannot happen: the record was replayed when added
            game.play(moves[ghost.shown], check_blocked=False)
        if game.foundation_cards != before:
            ghost.cards_ms = times[ghost.shown]
        ghost.shown += 1
        moved = True
    return moved


def ghost_key(ghost: GhostState, seat: int) -> RankKey:
    """docs/rules.md, Race ranking, for a ghost's shown game (as a racer's, ``_rows``)."""
    if ghost.game.status == WON:
        return (0, ghost.elapsed_ms, 0, seat)
    return (1, -ghost.game.foundation_cards, ghost.cards_ms, seat)


def ghost_rank(key: RankKey, live: list[RankKey]) -> int:
    """1 + the live racers ranked at or above ``key``: a ghost never takes a live racer's place
    (on a tie the live racer is ahead)."""
    return 1 + sum(1 for k in live if k[:3] <= key[:3])


def ghost_row(ghost: GhostState, status: str, rank: int) -> p.LeaderboardRow:
    return p.LeaderboardRow(
        player_id=ghost.record.player_id,
        name=ghost.record.name,
        bot=False,
        cards=ghost.game.foundation_cards,
        moves=ghost.shown,
        status=status,
        elapsed_ms=ghost.elapsed_ms,
        rank=rank,
        connected=True,
        ghost=True,
    )


class GhostsMixin(CoreBase):
    # ------------------------------------------------------------------ the lobby: adding and removing

    def _add_ghost(self, conn: int, room: RoomState, pid: str, msg: p.AddGhost) -> None:
        refused = self._ghost_refusal(room, pid, msg)
        if refused is not None:
            room.ghost_upload = None
            self._error(conn, refused[0], refused[1], "add_ghost")
            return
        upload = room.ghost_upload
        if msg.offset == 0:
            name = display_name(msg.name)  # checked by _ghost_refusal
            upload = GhostRecord(
                player_id=p.GHOST_PREFIX + self.entropy.player_id(),
                name=name,
                undo=msg.undo,
                moves=[],
                times=[],
                timed=msg.times is not None,
                status=PLAYING,
            )
        assert upload is not None
        upload.moves.extend(msg.moves)
        if msg.times is not None:
            upload.times.extend(msg.times)
        if msg.more:
            room.ghost_upload = upload
            return
        room.ghost_upload = None
        problem = self._finish_ghost(upload, msg.deal)
        if problem is not None:
            self._error(conn, p.BAD_GHOST, problem, "add_ghost")
            return
        if room.pending_deal is None:
            room.pending_deal = msg.deal
        room.ghosts.append(upload)
        self._note("ghost_added", room=room.code, ghost=upload.player_id, entries=len(upload.moves), timed=upload.timed)
        self._changed(room)

    def _ghost_refusal(self, room: RoomState, pid: str, msg: p.AddGhost) -> tuple[str, str] | None:
        """Why this add_ghost frame is refused (code, message), None if it is taken."""
        if room.host != pid:
            return p.NOT_HOST, "only the host may add a ghost"
        if room.phase != p.LOBBY:
            return p.WRONG_PHASE, f"ghosts are added in the lobby; the room is in {room.phase}"
        if msg.offset == 0:
            if len(room.ghosts) >= p.MAX_GHOSTS:
                return p.ROOM_FULL, f"a room races at most {p.MAX_GHOSTS} ghosts"
            try:
                display_name(msg.name)
            except NameInvalid as exc:
                return p.NAME_INVALID, f"the ghost's name: {exc}"
        else:
            upload = room.ghost_upload
            sent = -1 if upload is None else len(upload.moves)
            if upload is None or msg.offset != sent or upload.timed != (msg.times is not None):
                why = "this part of a ghost's record does not follow the part before it"
                return p.BAD_GHOST, why + " (its offset, or times in one part and not another): send it again"
        if msg.times is not None and len(msg.times) != len(msg.moves):
            return p.BAD_GHOST, f"the ghost's record has {len(msg.moves)} entries but {len(msg.times)} times"
        if msg.offset + len(msg.moves) > p.GHOST_ENTRIES_MAX:
            return p.BAD_GHOST, f"a ghost's record has at most {p.GHOST_ENTRIES_MAX} entries"
        deal = room.pending_deal  # a room with ghosts always has its deal
        if deal is not None and msg.deal != deal:
            why = "this record is of another deal than the room's: a ghost races only on the deal it was played on"
            return p.GHOST_WRONG_DEAL, why
        if deal is None and room.options.winnable_only:
            why = "this room deals only deals the solver proves winnable, never a chosen one: "
            why += "race a ghost in a room created with its deal"
            return p.GHOST_WRONG_DEAL, why
        return None

    def _finish_ghost(self, ghost: GhostRecord, deal: int) -> str | None:
        """Check a whole record (the engine replays it) and fill in its times and end; the reason
        it is refused, None if it is taken."""
        if not ghost.moves:
            return "the ghost's record has no entries"
        if ghost.timed:
            times = ghost.times
            if any(b < a for a, b in itertools.pairwise(times)):
                return "the ghost's times must not go backwards (each is the race time of its entry)"
        else:
            ghost.times = [(i + 1) * p.GHOST_PACE_MS for i in range(len(ghost.moves))]
        # Replayed as a stored log is (blocked decided once, at the end), within the move's budget:
        # a record whose end that cannot decide is shown playing to its last entry, then stopped.
        game = Game(deal, undo=ghost.undo, blocked_budget=self.config.blocked_budget)
        for index, move in enumerate(ghost.moves):
            try:
                game.play(move, check_blocked=False)
            except IllegalMove as exc:
                return f"the ghost's record is not a legal game: entry {index + 1} ({move}): {exc.reason}"
            if game.over and index + 1 < len(ghost.moves):
                return f"the ghost's record goes on after its game ended ({game.status}) at entry {index + 1}"
        game.settle_status()
        ghost.status = game.status
        return None

    def _remove_ghost(self, conn: int, room: RoomState, pid: str, target: str) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may remove a ghost", "remove_ghost")
            return
        if room.phase != p.LOBBY:
            why = f"ghosts are removed in the lobby; the room is in {room.phase}"
            self._error(conn, p.WRONG_PHASE, why, "remove_ghost")
            return
        kept = [g for g in room.ghosts if g.player_id != target]
        if len(kept) == len(room.ghosts):
            self._error(conn, p.UNKNOWN_PLAYER, f"no ghost {target!r} in this room", "remove_ghost")
            return
        room.ghosts = kept
        self._changed(room)

    def _ghosts_of_race(self, race: RaceState) -> list[GhostRecord]:
        """A ghost rematch: the last race's racers (the best MAX_GHOSTS of those who played), each
        on its own move times."""
        rows = race.final_rows if race.final_rows is not None else self._rows(race, final=True)
        ghosts: list[GhostRecord] = []
        for row in rows:
            racer = race.racers.get(row.player_id)
            if racer is None or not racer.game.entries or len(ghosts) >= p.MAX_GHOSTS:
                continue
            ghosts.append(
                GhostRecord(
                    player_id=p.GHOST_PREFIX + row.player_id,
                    name=row.name,
                    undo=race.record.undo,
                    moves=list(racer.game.entries),
                    times=list(racer.times),
                    timed=True,
                    status=racer.game.status,
                )
            )
        return ghosts

    def _ghost_entries(self, room: RoomState) -> list[p.GhostEntry]:
        race = room.race
        records = race.record.ghosts if race is not None and room.phase != p.LOBBY else room.ghosts
        return [p.GhostEntry(player_id=g.player_id, name=g.name, timed=g.timed) for g in records]

    # ------------------------------------------------------------------ the race

    def _ghost_states(self, record_ghosts: list[GhostRecord], deal: int, race_ms: int | None) -> dict[str, GhostState]:
        """The race's ghosts, each played up to ``race_ms`` (None: not started)."""
        ghosts: dict[str, GhostState] = {}
        for record in record_ghosts:
            ghost = GhostState(record=record, game=ghost_game(record, deal))
            if race_ms is not None:
                advance_ghost(ghost, race_ms)
            ghosts[record.player_id] = ghost
        return ghosts

    def _advance_ghosts(self, room: RoomState, now: int) -> None:
        """On the room's leaderboard tick (deadlines.py: due at the slot edge of their next entry):
        every ghost's entries whose time has come, so that the tick shows them."""
        race = room.race
        if race is None or room.phase != p.RACING or race.ending:
            return
        race_ms = now - race.record.starts_at
        for ghost in race.ghosts.values():
            if advance_ghost(ghost, race_ms):
                race.lb_dirty = True
                if room.boards_delay_ms is not None:
                    self._touched.add(room.code)  # its delayed board may reveal it: the wake-up is recomputed

    def _next_ghost_entry(self, race: RaceState) -> int | None:
        """Server ms of the next ghost entry due (the deadline table), None when none is left."""
        nexts = [g.next_ms for g in race.ghosts.values()]
        due = [t for t in nexts if t is not None]
        return race.record.starts_at + min(due) if due else None

    def _ghost_rows(self, race: RaceState, live: list[RankKey]) -> list[p.LeaderboardRow]:
        seats = len(race.racers)
        return [
            ghost_row(ghost, ghost.status, ghost_rank(ghost_key(ghost, seats + i), live))
            for i, ghost in enumerate(race.ghosts.values())
        ]

    def _ghost_results(self, race: RaceState, live: list[RankKey]) -> list[p.LeaderboardRow]:
        """The ghosts' rows in the results: each one's whole record (its own end), ranked against
        the racers' final rows (a ghost still playing at its record's end shows as stopped)."""
        rows: list[p.LeaderboardRow] = []
        seats = len(race.racers)
        for i, ghost in enumerate(race.ghosts.values()):
            whole = GhostState(record=ghost.record, game=ghost_game(ghost.record, race.record.deal))
            advance_ghost(whole, p.TIME_LIMIT_MAX * 1000)
            status = whole.status if whole.status != PLAYING else p.STOPPED
            rows.append(ghost_row(whole, status, ghost_rank(ghost_key(whole, seats + i), live)))
        return sorted(rows, key=p.row_order)

    def _ghost_boards(self, race: RaceState, as_of: int, advance: bool) -> tuple[bool, dict[str, View]]:
        """Spectators' delayed boards of the ghosts (as the racers', ``as_of`` race ms): whether
        one changed, and the boards."""
        changed = False
        boards: dict[str, View] = {}
        for pid, ghost in race.ghosts.items():
            if ghost.delayed is None:
                ghost.delayed = ghost_game(ghost.record, race.record.deal)
                ghost.delayed_n = 0
                changed = True
            if advance:
                times, moves = ghost.record.times, ghost.record.moves
                # Never ahead of its row: only entries already shown (with no delay, the board
                # would otherwise show an entry a tick before the leaderboard does).
                while ghost.delayed_n < ghost.shown and times[ghost.delayed_n] <= as_of:
                    with contextlib.suppress(IllegalMove):
                        ghost.delayed.play(moves[ghost.delayed_n], check_blocked=False)
                    ghost.delayed_n += 1
                    changed = True
            boards[pid] = ghost.delayed.view()
        return changed, boards

    def _ghost_reveals(self, race: RaceState) -> tuple[list[int], bool]:
        """The race times of the ghosts' next delayed entries, and whether a board is still unmade."""
        times = [
            g.record.times[g.delayed_n] for g in race.ghosts.values() if g.delayed is not None and g.delayed_n < g.shown
        ]
        return times, any(g.delayed is None for g in race.ghosts.values())
