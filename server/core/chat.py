"""Room chat, the host's mute, and finish announcements.

A chat line is text only (``p.ChatLine``): it never carries a board, a card or anything of the game,
and goes out in a frame of its own. Every decision is here: the length and character check, the
per-player rate, the mute, and who may read a line (a spectator's line during a race reaches only
the spectators unless the room's ``spectator_chat`` is ``always``). The room keeps its last
``chat_history`` lines in its record, so a joiner, a resumer, a rebuilt room and (several nodes)
the other nodes' members see them.
"""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.events import Send
from server.core.state import PlayerState, RaceState, RoomState
from shared import protocol as p
from shared.engine import WON

RACE_ON = (p.COUNTDOWN, p.RACING)


def line_key(line: p.ChatLine) -> tuple[int, str, int]:
    """A line's identity across nodes (two nodes may number lines alike before one's save loses)."""
    return (line.seq, line.player_id, line.at)


class ChatMixin(CoreBase):
    def _chat(self, conn: int, room: RoomState, player: PlayerState, text: str, now: int) -> None:
        member = room.members[player.player_id]
        reason = p.check_chat(text)
        if reason is not None:
            self._error(conn, p.BAD_FIELD, f"field 'text' of chat: {reason}", "chat")
            return
        if member.muted:
            self._error(conn, p.MUTED, "the host muted you in this room: your lines reach nobody", "chat")
            return
        times, window, burst = player.chat_times, self.config.chat_window_ms, self.config.chat_burst
        while times and times[0] <= now - window:
            times.popleft()
        if len(times) >= burst:
            wait_s = -(-(times[0] + window - now) // 1000)
            why = f"at most {burst} chat lines in {window // 1000} s: wait {wait_s} s before the next"
            self._error(conn, p.CHAT_LIMITED, why, "chat")
            return
        room_times, room_most = room.chat_times, self.config.chat_room_per_s
        while room_times and room_times[0] <= now - 1000:
            room_times.popleft()
        if len(room_times) >= room_most:
            why = f"the room's chat is busy (at most {room_most} lines a second in a room): say it again in a moment"
            self._error(conn, p.CHAT_LIMITED, why, "chat")
            return
        times.append(now)
        room_times.append(now)
        kept = (
            member.role == p.SPECTATOR and room.phase in RACE_ON and room.options.spectator_chat == p.CHAT_OUTSIDE_RACE
        )
        line = p.ChatLine(
            seq=room.chat[-1].seq + 1 if room.chat else 1,
            player_id=member.player_id,
            name=member.name,
            role=member.role,
            text=text.strip(),
            at=now,
            audience=p.TO_SPECTATORS if kept else p.TO_ALL,
            claimed=member.profile_id is not None,
        )
        room.chat.append(line)
        del room.chat[: -self.config.chat_history]
        # Saved with the room (written behind): the record carries the history to joiners and nodes.
        room.version += 1
        room.needs_save = True
        self._touched.add(room.code)
        said = p.ChatSaid(room=room.code, line=line)
        readers = self._chat_readers(room, line)
        if self.config.shared_rooms:
            # Several nodes: out once the save lands (a lost save replays the line on the store's room).
            room.after_save.append(Send(readers, said))
        else:
            self._send(readers, said)

    def _chat_readers(self, room: RoomState, line: p.ChatLine) -> tuple[str, ...]:
        if line.audience == p.TO_SPECTATORS:
            return room.spectator_ids()
        return room.member_ids()

    def _chat_history(self, conn: int, room: RoomState, player_id: str) -> None:
        """The room's recent lines this member may read, to a joining or resuming connection."""
        member = room.members.get(player_id)
        if member is None or not room.chat:
            return
        racer = member.role == p.RACER
        lines = [line for line in room.chat if not (racer and line.audience == p.TO_SPECTATORS)]
        self._reply(conn, p.ChatHistory(room=room.code, lines=lines))

    def _chat_arrived(self, old: RoomState, room: RoomState) -> None:
        """Several nodes: the store's room replaced this node's copy; its lines this copy did not
        hold (another node's) go to the members connected here who may read them."""
        known = {line_key(line) for line in old.chat}
        for line in room.chat:
            if line_key(line) in known:
                continue
            readers = tuple(pid for pid in self._chat_readers(room, line) if self._connected(pid))
            self._send(readers, p.ChatSaid(room=room.code, line=line))

    def _mute(self, conn: int, room: RoomState, pid: str, target: str, muted: bool) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may mute", "mute")
            return
        if target == pid:
            self._error(conn, p.BAD_FIELD, "field 'player_id' of mute: you cannot mute yourself", "mute")
            return
        member = room.members.get(target)
        if member is None:
            self._error(conn, p.UNKNOWN_PLAYER, f"{target!r} is not in room {room.code}", "mute")
            return
        if member.muted == muted:
            self._reply(conn, self._room_message(room, pid))  # nothing to change: the room as it is
            return
        member.muted = muted
        self._note("member_muted" if muted else "member_unmuted", room=room.code, player=target)
        self._changed(room)

    def _announce_finishes(
        self, room: RoomState, race: RaceState, rows: list[p.LeaderboardRow] | None, final: bool = False
    ) -> None:
        """Each racer whose game ended since the last announcement (won, blocked, resigned), to
        everyone in the room, with its place as the ranked ``rows`` have it (``final``: the race's
        final rows, so every place is final)."""
        new = [pid for pid, racer in race.racers.items() if racer.game.over and pid not in race.finished]
        if not new:
            return
        if rows is None:
            rows = self._rows(race, final=False)
        members = room.member_ids()
        if self.config.shared_rooms:  # another node tells its own members
            members = tuple(pid for pid in members if self._connected(pid))
        for row in rows:
            if row.player_id not in new:
                continue
            race.finished.add(row.player_id)
            finished = p.Finished(
                race=race.record.number,
                player_id=row.player_id,
                name=row.name,
                status=row.status,
                place=row.rank,
                cards=row.cards,
                elapsed_ms=row.elapsed_ms,
                final=final or row.status == WON,
            )
            self._send(members, finished)
