"""What the client knows, derived only from what the server shows it.

``game_from_view`` rebuilds an engine ``Game`` from a ``View`` without any hidden card: stock
cards and the reserve's buried cards are the placeholder :data:`HIDDEN`, which the rules never
look at (only the stock's length and the reserve's top matter to which moves are legal). The
board uses it to highlight legal destinations, the bot to choose its moves: neither ever needs
the deal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from shared.cards import rank
from shared.engine import Game, ReplayResult, View, replay
from shared.fairplay import check_commitment
from shared.protocol import (
    Boards,
    ChatHistory,
    ChatLine,
    ChatSaid,
    Countdown,
    Error,
    Finished,
    Kicked,
    Leaderboard,
    Left,
    Member,
    MoveOk,
    Pong,
    RaceStart,
    Results,
    Room,
    ServerMessage,
    Welcome,
)

HIDDEN: Final = -1  # a card the player cannot see; never played, never shown
CHAT_KEPT: Final = 200  # chat lines a client keeps (the server hands a joiner its last 50)


def game_from_view(view: View, *, undo: bool = True) -> Game:
    """An engine game in the position ``view`` shows (hidden cards are placeholders): see
    :meth:`shared.engine.Game.from_view`."""
    return Game.from_view(view, undo=undo, hidden=HIDDEN)


def legal_moves(view: View) -> list[str]:
    """Every legal move in the position ``view`` shows, in text form (undo and resign excluded)."""
    return game_from_view(view).legal_moves()


def needed_rank(view: View, foundation: int) -> int:
    """The rank foundation ``foundation`` (0..7) needs next; an empty one needs the base rank."""
    base = rank(view.foundations[0][0])
    return (base - 1 + len(view.foundations[foundation])) % 13 + 1


# ---------------------------------------------------------------- a race, as the server tells it


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class RaceModel:
    """Everything the client knows about its room and race, fed by server messages only.

    :meth:`apply` takes one message and returns the names of the parts that changed (``room``,
    ``countdown``, ``race``, ``view``, ``leaderboard``, ``boards``, ``results``, ``error``,
    ``left``, ``chat``, ``finished``), so the screens redraw only what they must. Stale messages (an older room version,
    an older leaderboard, a view behind the one shown) are ignored.
    """

    player_id: str | None = None
    room: Room | None = None
    countdown: Countdown | None = None
    race: RaceStart | None = None
    commitment: str | None = None  # as received at the start: the results are checked against this
    view: View | None = None
    seq: int = -1
    leaderboard: Leaderboard | None = None
    boards: Boards | None = None
    results: Results | None = None
    last_error: Error | None = None
    left_reason: str | None = None
    clock_offset_ms: int = 0  # server time minus local time
    saved_records: dict[str, Path] = field(default_factory=dict)
    chat: list[ChatLine] = field(default_factory=list)  # the room's lines, by seq, each once
    chat_room: str | None = None  # the room ``chat`` is of
    finishes: list[Finished] = field(default_factory=list)  # this race's finish events, as they came
    # The room's feed as it came: chat lines and finish events in arrival order (the screens show its end).
    feed: list[ChatLine | Finished] = field(default_factory=list)
    _replayed: tuple[Results, dict[str, ReplayedRecord]] | None = None  # replays of these results, made once
    # Each row's (race ms, cards) as the leaderboards showed it, this race: the live splits against
    # a ghost (shared/splits.py) come from these, the same figures for the racer and the ghost.
    samples: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    # ------------------------------------------------------------------ feeding

    def apply(self, msg: ServerMessage) -> set[str]:
        if isinstance(msg, Welcome):
            self.player_id = msg.player_id
            self._clock(msg.server_time)
            return {"welcome"}
        if isinstance(msg, Room):
            if self.room is not None and self.room.code == msg.code and msg.version < self.room.version:
                return set()
            changed = {"room"}
            if self.race is not None and self.race.race != msg.race:
                self._new_race()  # a rematch (or another room): the old race's state goes
                changed.add("race")
            self.room = msg
            self.left_reason = None
            return changed
        if isinstance(msg, Countdown):
            self._clock(msg.server_time)
            if self.race is not None and self.race.race != msg.race:
                self._new_race()
            self.countdown = msg
            return {"countdown"}
        if isinstance(msg, RaceStart):
            self._clock(msg.server_time)
            if self.race is None or self.race.race != msg.race:
                self._new_race()
                self.commitment = msg.commitment
            elif self.commitment is None:
                self.commitment = msg.commitment
            self.race = msg
            self.countdown = None
            changed = {"race"}
            if msg.view is not None and msg.seq >= self.seq:
                self.view, self.seq = msg.view, msg.seq
                changed.add("view")
            return changed
        if isinstance(msg, MoveOk):
            # The connection fills in the board after the move (protocol 2 sends the changes);
            # None: the board diverged, and the whole board is on its way (a race_start).
            if msg.view is not None and msg.seq >= self.seq:
                self.view, self.seq = msg.view, msg.seq
                return {"view"}
            return set()
        if isinstance(msg, Leaderboard):
            merged = msg.merged_into(self.leaderboard)  # a partial one holds only the changed rows
            if merged is None:
                return set()
            self.leaderboard = merged
            for row in msg.racers:
                points = self.samples.setdefault(row.player_id, [])
                if not points or points[-1] != (row.elapsed_ms, row.cards):
                    points.append((row.elapsed_ms, row.cards))
            return {"leaderboard"}
        if isinstance(msg, Boards):
            self.boards = msg
            return {"boards"}
        if isinstance(msg, Results):
            # Another race's results (a node that read the room back late, a resume's replay) are
            # never this race's: they would show (and save) an old ranking as the current one.
            current = self.room.race if self.room is not None else self.race.race if self.race is not None else None
            if current is not None and msg.race != current:
                return set()
            self.results = msg
            return {"results"}
        if isinstance(msg, Error):
            self.last_error = msg
            return {"error"}
        if isinstance(msg, Left | Kicked):
            self.room = None
            if isinstance(msg, Kicked):
                self.left_reason = "kicked by the host" if msg.reason == "host" else "the lobby expired unused"
            else:
                self.left_reason = "left"
            return {"left"}
        if isinstance(msg, ChatSaid | ChatHistory):
            return self._chat(msg)
        if isinstance(msg, Finished):
            if self.race is not None and self.race.race != msg.race:
                return set()
            if any(f.player_id == msg.player_id for f in self.finishes):
                return set()
            self.finishes.append(msg)
            self.feed.append(msg)
            return {"finished"}
        if isinstance(msg, Pong):
            self._clock(msg.server_time)
        return set()

    def _chat(self, msg: ChatSaid | ChatHistory) -> set[str]:
        if msg.room != self.chat_room:
            self.chat, self.chat_room = [], msg.room
            self.feed = [item for item in self.feed if isinstance(item, Finished)]
        lines = msg.lines if isinstance(msg, ChatHistory) else [msg.line]
        known = {line.seq for line in self.chat}
        new = [line for line in lines if line.seq not in known]
        if not new:
            return set()
        self.chat = sorted([*self.chat, *new], key=lambda line: line.seq)[-CHAT_KEPT:]
        self.feed = [*self.feed, *new][-CHAT_KEPT:]
        return {"chat"}

    def chat_senders(self) -> dict[str, str]:
        """Names a host may mute, as the room shows them: player id -> name (members, then chat senders)."""
        names = {line.player_id: line.name for line in self.chat}
        if self.room is not None:
            names.update((m.player_id, m.name) for m in self.room.members)
        names.pop(self.player_id or "", None)
        return names

    def _new_race(self) -> None:
        self.race = None
        self.commitment = None
        self.view = None
        self.seq = -1
        self.leaderboard = None
        self.boards = None
        self.results = None
        self.countdown = None
        self.finishes = []
        self.samples = {}

    def _clock(self, server_time: int) -> None:
        self.clock_offset_ms = server_time - now_ms()

    # ------------------------------------------------------------------ reading

    def server_now(self) -> int:
        return now_ms() + self.clock_offset_ms

    @property
    def phase(self) -> str | None:
        return self.room.phase if self.room else None

    @property
    def is_host(self) -> bool:
        return self.room is not None and self.room.host == self.player_id

    @property
    def me(self) -> Member | None:
        if self.room is None:
            return None
        return next((m for m in self.room.members if m.player_id == self.player_id), None)

    @property
    def role(self) -> str | None:
        me = self.me
        return me.role if me else None

    def race_clock_ms(self) -> int | None:
        """Race time now (from the start signal), by the server's clock; None before the start."""
        if self.race is None:
            return None
        if self.results is not None and self.leaderboard is not None:
            return max((row.elapsed_ms for row in self.leaderboard.racers), default=0)
        return max(self.server_now() - self.race.started_at, 0)

    def countdown_left_ms(self) -> int | None:
        if self.countdown is None:
            return None
        return max(self.countdown.starts_at - self.server_now(), 0)

    def member_name(self, player_id: str) -> str:
        if self.room is not None:
            for member in self.room.members:
                if member.player_id == player_id:
                    return member.name
        if self.leaderboard is not None:
            for row in self.leaderboard.racers:
                if row.player_id == player_id:
                    return row.name
        return player_id

    def replayed(self) -> dict[str, ReplayedRecord]:
        """Every revealed record of the current results replayed here, once per results message
        (repaints and board cycling reuse them); empty before the results."""
        results = self.results
        if results is None:
            return {}
        if self._replayed is None or self._replayed[0] is not results:
            self._replayed = (results, replay_results(results))
        return self._replayed[1]

    def commitment_verified(self) -> bool | None:
        """Does the revealed deal and salt match the commitment received at the start? None before the results."""
        if self.results is None:
            return None
        expected = self.commitment or self.results.commitment
        return check_commitment(self.results.deal, self.results.salt, expected)


@dataclass(frozen=True, slots=True)
class ReplayedRecord:
    """One revealed record replayed on the local engine."""

    view: View  # the final board
    game: Game  # the final position
    result: ReplayResult
    cards: list[int]  # foundation cards after each applied entry


def replay_results(results: Results) -> dict[str, ReplayedRecord]:
    """Replay every revealed record once: final boards, the checks, the cards over each game."""
    out: dict[str, ReplayedRecord] = {}
    for player_id, record in results.records.items():
        cards: list[int] = []
        game, result = replay(record.deal, record.moves, undo=record.undo, progress=cards)
        out[player_id] = ReplayedRecord(view=game.view(), game=game, result=result, cards=cards)
    return out


def final_views(results: Results) -> dict[str, View]:
    """Every racer's final board, by replaying the revealed records (the client's own check)."""
    return {player_id: replayed.view for player_id, replayed in replay_results(results).items()}
