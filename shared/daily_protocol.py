"""The daily deal's messages (docs/daily.md, docs/protocol.md "The daily deal"): the day, its
board, a player's standing. Declared here and joined into shared/protocol.py's unions, so they
are sent and decoded like every other message.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

BOARD_PAGE = 100  # rows of a board frame at most (a day may have 100,000 attempts)
HISTORY_MAX = 30  # days of a player's history in a profile

# ---------------------------------------------------------------- shared structures


class DailyRow(msgspec.Struct, kw_only=True):
    """One attempt on a day's board (docs/daily.md): figures only, never a board."""

    name: str
    claimed: bool
    profile_id: str
    status: str  # playing | won | blocked | resigned | stopped
    cards: int  # cards on the foundations (0..104)
    moves: int  # accepted entries of the attempt
    elapsed_ms: int  # time of its last accepted entry, from the moment the server sent the board
    rank: int  # 1-based, docs/rules.md, "Race ranking" (a live row: as it stands)


class DailyResult(msgspec.Struct, kw_only=True):
    """One day of a player's history."""

    day: int
    date: str  # YYYY-MM-DD of the day's start (UTC)
    status: str
    cards: int
    moves: int
    elapsed_ms: int
    rank: int  # the final rank on the day's board (0: not known yet, the day is still on)
    players: int  # attempts on the day's board


class StandingRow(msgspec.Struct, kw_only=True):
    """A row of the all-days standing board (docs/daily.md, "The standing board")."""

    name: str
    profile_id: str
    points: int
    days_played: int
    days_won: int
    best_streak: int
    rank: int


# ---------------------------------------------------------------- client -> server


class Daily(msgspec.Struct, tag="daily", tag_field="type", kw_only=True):
    """Start (or resume) today's ranked attempt at the daily deal; ``replay``: an unranked game of
    today's deal, for a player whose ranked attempt is over. ``day``, when given, must be today
    (a client whose day has rolled over is told ``day_over``)."""

    replay: bool = False
    day: Annotated[int, msgspec.Meta(ge=0)] | None = None


class WatchDaily(msgspec.Struct, tag="watch_daily", tag_field="type", kw_only=True):
    """Follow today's board live (``daily_board`` frames as it changes); ``watch: false`` stops."""

    watch: bool = True


class GetBoard(msgspec.Struct, tag="get_board", tag_field="type", kw_only=True):
    """A day's board (None: today), rows from ``offset`` on (at most 100 a frame); a day that is
    over and revealed comes with its deal, salt and the records of those rows. ``boards: true``
    asks for live boards, which nobody gets (``no_boards``)."""

    day: Annotated[int, msgspec.Meta(ge=0)] | None = None
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    boards: bool = False


class GetPlayer(msgspec.Struct, tag="get_player", tag_field="type", kw_only=True):
    """A claimed player's daily profile (streaks, bests, history)."""

    name: Annotated[str, msgspec.Meta(max_length=128)]


class GetStanding(msgspec.Struct, tag="get_standing", tag_field="type", kw_only=True):
    """The all-days standing board, rows from ``offset`` on (at most 100)."""

    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


# ---------------------------------------------------------------- server -> client


class DailyDay(msgspec.Struct, tag="daily_day", tag_field="type", kw_only=True):
    """A day of the daily deal as committed before it began: its number, date, bounds (server ms)
    and commitment (sha256("the-plot:<deal>:<salt>"), docs/rules.md, "Fair play")."""

    day: int
    date: str  # YYYY-MM-DD of its start, UTC (with --day-seconds other than 86400, the start's date)
    starts_at: int
    ends_at: int
    commitment: str
    time_limit_s: int  # each attempt's limit, from the moment the server sends its board
    server_time: int = 0


class DailyBoard(msgspec.Struct, tag="daily_board", tag_field="type", kw_only=True, omit_defaults=True):
    """A day's board: rows from ``offset`` on, in rank order. ``final``: the day is over and every
    attempt of it has ended (then, revealed: ``deal``, ``salt`` and ``records``, name -> record, of
    these rows)."""

    day: int
    rows: list[DailyRow]
    final: bool = False
    total: int = 0  # attempts on the board in all
    offset: int = 0
    date: str = ""
    commitment: str = ""
    deal: Annotated[int, msgspec.Meta(ge=0)] | None = None
    salt: str | None = None
    records: dict[str, list[str]] | None = None  # name -> the moves of its record (deal: the day's, undo on)
    you: DailyRow | None = None  # the recipient's own row, when it has one and it is not in ``rows``


class PlayerProfile(msgspec.Struct, tag="player_profile", tag_field="type", kw_only=True):
    """A claimed player's daily standing: streaks count days in a row with a finished attempt."""

    name: str
    profile_id: str
    created_ms: int
    days_played: int
    days_won: int
    streak: int  # days in a row up to the last day played (0 once a day is missed)
    best_streak: int
    best_ms: int | None  # the fastest win
    best_cards: int
    points: int  # the standing board's aggregate (docs/daily.md)
    history: list[DailyResult]  # the last days played, newest first (at most 30)
    rating: float | None = None


class Standing(msgspec.Struct, tag="standing", tag_field="type", kw_only=True):
    """The all-days standing board (docs/daily.md)."""

    rows: list[StandingRow]
    total: int
    offset: int = 0
