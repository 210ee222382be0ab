"""Ghosts on the client (docs/ghosts.md): a saved record read as a ghost, sent to the server in
frames that fit its frame limit, and the live splits against a ghost from the leaderboard rows.

A record file is what ``plot`` saves after every race (``state_dir()/records/ROOM-raceN/``) or any
game record (docs/rules.md): ``{"deal", "moves", "undo"?, "times"?, "name"?}``. With ``times``
(the race time of each entry, as the results have them) the ghost races on them; without, the
server paces it evenly (shared.protocol.GHOST_PACE_MS an entry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from shared.engine import NotARecord, parse_record
from shared.protocol import GHOST_CHUNK_MAX, GHOST_ENTRIES_MAX, AddGhost, Results
from shared.splits import Split, milestone_times, splits

# What one add_ghost frame may carry, in bytes of entries (moves and times): well under the
# server's default frame limit (4096 bytes), whatever the name.
FRAME_BUDGET: Final = 3000


class GhostFileError(ValueError):
    """A file that is not a record a ghost can race on (the message says why)."""


@dataclass(frozen=True, slots=True)
class GhostFile:
    name: str
    deal: int
    moves: tuple[str, ...]
    times: tuple[int, ...] | None
    undo: bool = True


def load_ghost(path: Path, name: str | None = None) -> GhostFile:
    """A record file as a ghost; ``name``: what its row shows (default: the file's, or its stem)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GhostFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GhostFileError(f"{path} is not JSON: {exc}") from None
    try:
        deal, entries, undo = parse_record(data)
    except NotARecord as exc:
        raise GhostFileError(f"{path}: {exc}") from None
    if not all(isinstance(e, str) for e in entries):
        raise GhostFileError(f"{path}: every entry of 'moves' must be a string like 'waste>t3'")
    moves = tuple(str(e) for e in entries)
    if not moves:
        raise GhostFileError(f"{path}: the record has no moves")
    if len(moves) > GHOST_ENTRIES_MAX:
        raise GhostFileError(f"{path}: a ghost's record has at most {GHOST_ENTRIES_MAX} entries ({len(moves)} here)")
    raw_times = data.get("times") if isinstance(data, dict) else None
    times: tuple[int, ...] | None = None
    if raw_times is not None:
        if not isinstance(raw_times, list) or not all(isinstance(t, int) and t >= 0 for t in raw_times):
            raise GhostFileError(f"{path}: 'times' must be a list of race times in ms")
        if len(raw_times) != len(moves):
            raise GhostFileError(f"{path}: {len(moves)} moves but {len(raw_times)} times")
        times = tuple(raw_times)
    shown = name or (data.get("name") if isinstance(data.get("name"), str) else None) or path.stem
    return GhostFile(name=shown[:24], deal=deal, moves=moves, times=times, undo=undo)


def ghost_frames(ghost: GhostFile) -> list[AddGhost]:
    """The add_ghost frames of one ghost, each within FRAME_BUDGET bytes of entries."""
    frames: list[AddGhost] = []
    start = 0
    moves, times = ghost.moves, ghost.times
    while start < len(moves):
        end, size = start, 0
        while end < len(moves) and end - start < GHOST_CHUNK_MAX:
            size += len(moves[end]) + 1 + (5 if times is not None else 0)
            if size > FRAME_BUDGET and end > start:
                break
            end += 1
        frames.append(
            AddGhost(
                name=ghost.name,
                deal=ghost.deal,
                undo=ghost.undo,
                moves=list(moves[start:end]),
                times=None if times is None else list(times[start:end]),
                offset=start,
                more=end < len(moves),
            )
        )
        start = end
    return frames


def record_data(results: Results, player_id: str, name: str) -> dict[str, object]:
    """A racer's saved record, with its times and name: a ghost file as it is (plot practice --ghost)."""
    record = results.records[player_id]
    data: dict[str, object] = {"deal": record.deal, "moves": list(record.moves)}
    if not record.undo:
        data["undo"] = False
    times = results.times.get(player_id)
    if times is not None and len(times) == len(record.moves):
        data["times"] = list(times)
    data["name"] = name
    return data


def live_split(samples: dict[str, list[tuple[int, int]]], me: str, ghost: str, now_ms: int) -> Split | None:
    """The racer's latest split against ``ghost`` from the leaderboard rows seen so far, None
    before either reached the first milestone."""
    found = splits(milestone_times(samples.get(me, [])), milestone_times(samples.get(ghost, [])), now_ms=now_ms)
    return found[-1] if found else None


def ghosts_for_room(paths: list[str], deal: int | None) -> tuple[tuple[GhostFile, ...], int | None]:
    """The ghosts of ``--ghost FILE`` options and the room's deal: theirs (one deal for all, and
    ``deal``'s if one was given). Raises GhostFileError with what to change."""
    ghosts = tuple(load_ghost(Path(path).expanduser()) for path in paths)
    deals = {g.deal for g in ghosts}
    if len(deals) > 1:
        raise GhostFileError("the ghosts are of different deals: a room races its ghosts on one deal")
    if deals and deal is not None and deal not in deals:
        raise GhostFileError(f"the ghost's record is of deal {next(iter(deals))}, not --deal {deal}: leave out --deal")
    return ghosts, next(iter(deals)) if deals else deal
