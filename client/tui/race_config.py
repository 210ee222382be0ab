"""What a race command asks of the race app (client/tui/race.py), and the modes it enters a room by."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from client.ghosts import GhostFile
from shared.protocol import RoomOptions

HOST = "host"
CHAT_PLACEHOLDER = "chat: Enter sends, Esc leaves (host: /mute NAME, /unmute NAME, /ghost FILE)"
RANDOM_PRACTICE_DEAL = "picked for you at random"
GIVEN_PRACTICE_DEAL = "the number you gave"
JOIN = "join"
WATCH = "watch"


@dataclass(slots=True)
class RaceConfig:
    """What a race command asks of the app."""

    url: str
    name: str
    mode: str  # host | join | watch
    code: str | None = None
    options: RoomOptions = field(default_factory=RoomOptions)
    profile: str | None = "player"  # which saved token to use for this server (None: keep none)
    bots: int = 0  # bots the host adds, run in this process
    bot_speed: float | None = None  # moves per second (None: each bot's level's own pace)
    bot_levels: tuple[str, ...] = ("medium",)  # the bots take these levels in turn
    auto_start: bool = False  # start as soon as every racer is ready (practice)
    record_dir: Path | None = None
    hint: Callable[[], Awaitable[str]] | None = None  # practice only: a hint knows the stock
    next_deal: Callable[[], int] | None = None  # the deal of each rematch, when the host chooses (practice)
    title: str = "The Plot race"
    watch_url: str | None = None  # the spectator page's base URL: the lobby shows the room's link (plot host)
    deal_note: str | None = None  # practice: how the (chosen) deal was chosen, said instead of the chosen-deal warning
    reachable: bool = True  # others can reach the server (False: practice, a server inside this process)
    ghosts: tuple[GhostFile, ...] = ()  # added to the room once it is created (host: plot host/practice --ghost)
