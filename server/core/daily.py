"""The daily deal in the core (docs/daily.md): the day clock, the day's record, attempts, the
board and its watchers, a player's standing. Pure: events in, effects out.

An attempt is a one-racer private room whose code names the day and the profile
(``d<day>.<profile id>``, server/core/daily_rules.py): its race's deal, salt and commitment are
the day's, so the race machinery persists every move before it is acknowledged, resumes it on any
node and after a restart, times it from the start and stops it at its time limit. What differs is
decided here: the room is created by compare-and-set on its code (so one attempt per profile and
day, whichever node), nobody forfeits by leaving (the clock runs on), and what ends it never shows
the deal (the final leaderboard, then the day's board, instead of ``results``).
"""

from __future__ import annotations

import msgspec

from server.core.base import CoreBase
from server.core.daily_events import (
    BoardRead,
    CreateDay,
    DailyDealFound,
    DailyTick,
    DayLoaded,
    FindDailyDeal,
    FinishDaily,
    LoadDay,
    ProfileRead,
    PutDailyRow,
    ReadBoard,
    ReadProfile,
    ReadStanding,
    StandingRead,
    WakeDaily,
)
from server.core.daily_rules import (
    DailyRowRecord,
    DayRecord,
    attempt_code,
    board_message,
    board_score,
    daily_room,
    day_date,
    day_message,
    day_of,
    day_start,
    decode_row,
    encode,
    points,
    prepare_at,
    replay_code,
)
from server.core.events import CreateRoomRecord, RoomCreated, RoomCreateFailed, SavePlayer
from server.core.records import RaceRecord, RacerInfo, RoomRecord
from server.core.state import PlayerState, RoomState
from shared import protocol as p
from shared.engine import PLAYING, WON
from shared.fairplay import commitment

_encoder = msgspec.msgpack.Encoder()


class DailyMixin(CoreBase):
    # ------------------------------------------------------------------ the clock

    @property
    def _day_s(self) -> int:
        return self.config.day_seconds

    def _daily_tick(self, ev: DailyTick) -> None:
        daily = self.daily
        daily.wake_at = None
        today = day_of(ev.now, self._day_s)
        self._want_day(today)
        if ev.now >= prepare_at(today + 1, self._day_s):
            self._want_day(today + 1)
        for day in [d for d in daily.days if d < today - 1]:
            del daily.days[day]
        if daily.watchers:
            if daily.watch_day != today and today in daily.days:
                daily.watch_day = today
                daily.watch_last = b""
                self._send_watchers(day_message(daily.days[today], self._day_s, ev.now))
            if not daily.watch_reading and today in daily.days:
                daily.watch_reading = True
                self._out.append(ReadBoard(None, today))
        self._daily_schedule(ev.now)

    def _daily_schedule(self, now: int) -> None:
        """The next DailyTick: the next day's start or preparation, or the watchers' next poll."""
        today = day_of(now, self._day_s)
        due = [day_start(today + 1, self._day_s)]
        prepare = prepare_at(today + 1, self._day_s)
        if prepare > now:
            due.append(prepare)
        if self.daily.watchers or today not in self.daily.days or (now >= prepare and today + 1 not in self.daily.days):
            due.append(now + self.config.daily_poll_ms)
        at = max(now + 1, min(due))
        if at != self.daily.wake_at:
            self.daily.wake_at = at
            self._out.append(WakeDaily(at))

    def _want_day(self, day: int) -> None:
        daily = self.daily
        if day not in daily.days and day not in daily.loading and day not in daily.searching:
            daily.loading.add(day)
            self._out.append(LoadDay(day))

    def _day_loaded(self, ev: DayLoaded) -> None:
        daily = self.daily
        daily.loading.discard(ev.day)
        today = day_of(ev.now, self._day_s)
        if ev.failed:
            self._answer_waiting(ev.day, p.STORE_UNAVAILABLE, "the store did not answer: try again")
        elif ev.record is None:
            if ev.day >= today and ev.day not in daily.searching:
                # Not committed yet: this node finds the deal (another may too; the first stored wins).
                daily.searching.add(ev.day)
                self._out.append(FindDailyDeal(ev.day))
                self._note("daily_deal_search", day=ev.day)
        else:
            daily.days[ev.day] = ev.record
            self._note("daily_day", day=ev.day, commitment=ev.record.commitment)
            if ev.day == today and daily.watchers and daily.watch_day != today:
                daily.watch_day = today
                daily.watch_last = b""
                self._send_watchers(day_message(ev.record, self._day_s, ev.now))
            for conn, msg in daily.waiting.pop(ev.day, []):
                player = self._player_of(conn)
                if player is not None:
                    self._daily_request(conn, player, msg, ev.now)
        self._daily_schedule(ev.now)

    def _daily_deal_found(self, ev: DailyDealFound) -> None:
        daily = self.daily
        daily.searching.discard(ev.day)
        if ev.deal is None:
            self._note("daily_deal_search_failed", level="warning", day=ev.day, detail=ev.detail)
            self._answer_waiting(ev.day, p.SERVER_BUSY, "today's deal is being prepared: try again in a moment")
        else:
            salt = self.entropy.salt()
            start = day_start(ev.day, self._day_s)
            record = DayRecord(
                day=ev.day,
                deal=ev.deal,
                salt=salt,
                commitment=commitment(ev.deal, salt),
                starts_at=start,
                ends_at=start + self._day_s * 1000,
                time_limit_s=self.config.daily_time_limit_s,
                created_ms=ev.now,
            )
            daily.loading.add(ev.day)
            self._out.append(CreateDay(record))
        self._daily_schedule(ev.now)

    def _answer_waiting(self, day: int, code: str, why: str) -> None:
        for conn, _msg in self.daily.waiting.pop(day, []):
            if conn in self.conns:
                self._error(conn, code, why, "daily")

    def _player_of(self, conn: int) -> PlayerState | None:
        pid = self.conns.get(conn)
        return self.players.get(pid) if pid is not None else None

    # ------------------------------------------------------------------ client messages

    def _daily_client(self, conn: int, player: PlayerState, msg: p.ClientMessage, now: int) -> None:
        if not self.config.daily:
            self._error(conn, p.NO_DAY, "this server has no daily deal (plot-server --daily on)", p.message_type(msg))
            return
        if isinstance(msg, p.Daily):
            self._daily_request(conn, player, msg, now)
        elif isinstance(msg, p.WatchDaily):
            self._watch_daily(conn, msg.watch, now)
        elif isinstance(msg, p.GetBoard):
            self._get_board(conn, player, msg, now)
        elif isinstance(msg, p.GetPlayer):
            self._out.append(ReadProfile(conn, msg.name))
        elif isinstance(msg, p.GetStanding):
            self._out.append(ReadStanding(conn, msg.offset))

    def _daily_request(self, conn: int, player: PlayerState, msg: p.Daily, now: int) -> None:
        profile = player.profile_id
        if profile is None:
            why = "the daily deal is for claimed names: claim yours first (plot claim NAME)"
            self._error(conn, p.NOT_CLAIMED, why, "daily")
            return
        today = day_of(now, self._day_s)
        if msg.day is not None and msg.day != today:
            if msg.day < today:
                why = f"day {msg.day} ({day_date(msg.day, self._day_s)}) has ended: today is day {today}"
                self._error(conn, p.DAY_OVER, why, "daily")
            else:
                self._error(conn, p.NO_DAY, f"day {msg.day} has not begun: today is day {today}", "daily")
            return
        held = self.rooms.get(player.room) if player.room is not None else None
        if held is not None and daily_room(held.code) is not None and held.phase in (p.COUNTDOWN, p.RACING):
            self._daily_in_room(conn, player, held, msg, now)  # an attempt under way (perhaps begun yesterday)
            return
        record = self.daily.days.get(today)
        if record is None:
            self.daily.waiting.setdefault(today, []).append((conn, msg))
            self._want_day(today)
            self._daily_schedule(now)
            return
        code = attempt_code(today, profile)
        if player.room is not None and player.room != code:
            if daily_room(player.room) is None:
                self._error(conn, p.WRONG_PHASE, f"you are in room {player.room}: leave it first", "daily")
                return
            self._leave_finished(player, now)  # an earlier day's attempt, over (a running one resumed above)
        room = self.rooms.get(code)
        if room is not None:
            self._daily_in_room(conn, player, room, msg, now)
        else:
            self._load(code).dailies.append((conn, msg))  # in the store, perhaps (another node, a restart)

    def _daily_in_room(self, conn: int, player: PlayerState, room: RoomState, msg: p.Daily, now: int) -> None:
        member = room.members.get(player.player_id)
        if room.phase == p.RESULTS or (member is None and room.phase not in (p.LOBBY,)):
            if msg.replay and room.phase == p.RESULTS:
                self._daily_replay(conn, player, now)
                return
            if member is None and room.phase != p.RESULTS:
                why = "today's attempt of your name is being played by your other device: resume it there"
                self._error(conn, p.NOT_YOUR_RECORD, why, "daily")
                return
            why = "you have played today's deal: one ranked attempt a day (a replay, unranked: daily {replay: true})"
            self._error(conn, p.DAILY_DONE, why, "daily")
            return
        if msg.replay:
            self._error(conn, p.WRONG_PHASE, "finish your ranked attempt first: a replay follows it", "daily")
            return
        kind = daily_room(room.code)
        record = self.daily.days.get(kind[1]) if kind is not None else None
        if record is not None:
            self._reply(conn, day_message(record, self._day_s, now))
        if player.room != room.code:
            player.room = room.code
            self._out.append(SavePlayer(player.record(), player.token_hash))
        if member is None:
            return
        self._seat_back(conn, room, player, now)
        if room.phase == p.LOBBY:  # stored before its node could start it
            self._daily_begin(room, now)

    def _daily_loaded(self, code: str, record: RoomRecord | None, dailies: list[tuple[int, p.Daily]], now: int) -> None:
        """The attempt's room as the store has it: resume it, refuse a second attempt, or create it."""
        for conn, msg in dailies:
            player = self._player_of(conn)
            if player is None:
                continue
            room = self.rooms.get(code)
            if room is not None:
                self._daily_in_room(conn, player, room, msg, now)
            elif record is not None:  # stored closed: finished, and its room closed since
                if msg.replay:
                    self._daily_replay(conn, player, now)
                else:
                    self._error(conn, p.DAILY_DONE, "you have played today's deal: one ranked attempt a day", "daily")
            elif msg.replay:
                self._error(conn, p.WRONG_PHASE, "play your ranked attempt first: a replay follows it", "daily")
            else:
                self._daily_create(conn, player, code, now)

    def _daily_replay(self, conn: int, player: PlayerState, now: int) -> None:
        today = day_of(now, self._day_s)
        assert player.profile_id is not None
        if player.room is not None:
            old = self.rooms.get(player.room)
            if (old is not None and old.phase in (p.COUNTDOWN, p.RACING)) or daily_room(player.room) is None:
                self._error(conn, p.WRONG_PHASE, f"you are in room {player.room}: leave it first", "daily")
                return
            self._leave_finished(player, now)
        self._daily_create(conn, player, replay_code(today, player.profile_id, self.entropy.room_code()), now)

    def _daily_create(self, conn: int, player: PlayerState, code: str, now: int) -> None:
        kind = daily_room(code)
        record = self.daily.days.get(kind[1]) if kind is not None else None
        if record is None:
            self._error(conn, p.STORE_UNAVAILABLE, "today's deal is not loaded here yet: try again", "daily")
            return
        if conn in self._creating:
            self._error(conn, p.WRONG_PHASE, "your attempt is being prepared already", "daily")
            return
        if len(self.rooms) + len(self._creating) >= self.config.max_rooms:
            self._error(conn, p.SERVER_FULL, "the server has as many rooms as it may: try again later", "daily")
            return
        self._creating[conn] = 0
        member = player.racer_record(self.config.node_id, ready=True)
        options = p.RoomOptions(max_racers=2, private=True, time_limit=record.time_limit_s, bots_allowed=False)
        room = RoomRecord(
            code=code,
            options=options,
            host=player.player_id,
            phase=p.LOBBY,
            version=1,
            race_number=1,
            members=[member],
            race=None,
            pending_deal=None,
            created_ms=now,
            last_activity_ms=now,
        )
        self._out.append(CreateRoomRecord(conn, room))

    def _daily_created(self, ev: RoomCreated) -> None:
        self._creating.pop(ev.conn, None)
        code = ev.record.code
        player = self._player_of(ev.conn)
        if player is None or code in self.rooms or (player.room is not None and player.room != code):
            return  # gone meanwhile: the stored lobby is started when it comes back (_daily_in_room)
        room = self._room_from_record(ev.record, {}, ev.now)
        self.rooms[code] = room
        player.room = code
        self._out.append(SavePlayer(player.record(), player.token_hash))
        self._note("daily_attempt", room=code, player=player.player_id, profile=player.profile_id)
        kind = daily_room(code)
        record = self.daily.days.get(kind[1]) if kind is not None else None
        if record is not None:
            self._reply(ev.conn, day_message(record, self._day_s, ev.now))
        self._daily_begin(room, ev.now)

    def _daily_create_failed(self, ev: RoomCreateFailed) -> None:
        self._creating.pop(ev.conn, None)
        if ev.conn not in self.conns:
            return
        if not ev.taken:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "your attempt could not be stored: try again", "daily")
            return
        # Another node (or this one, before) created it: load it and go on from what it holds.
        self._load(ev.record.code).dailies.append((ev.conn, p.Daily()))

    def _daily_begin(self, room: RoomState, now: int) -> None:
        """The attempt's race: the day's deal and commitment, timed from now (its board goes out
        once the record holding this start is stored)."""
        kind = daily_room(room.code)
        record = self.daily.days.get(kind[1]) if kind is not None else None
        racers = [room.members[pid] for pid in room.racer_ids()]
        if kind is None or record is None or not racers:
            return
        racer = racers[0]
        race = RaceRecord(
            number=room.race_number,
            deal=record.deal,
            salt=record.salt,
            commitment=record.commitment,
            chosen_deal=False,
            undo=True,
            starts_at=now,
            ends_at=now + record.time_limit_s * 1000,
            racers=[
                RacerInfo(
                    player_id=racer.player_id,
                    name=racer.name,
                    bot=racer.bot,
                    token_hash=racer.token_hash,
                    profile_id=kind[2],
                )
            ],
        )
        room.race = self._race_from_record(room, race, {}, now)
        room.race.unstored = True
        self._set_phase(room, p.COUNTDOWN)
        self._expire(room.code, self.config.room_ttl_s)
        self._changed(room)
        if kind[0] == "ranked":
            self._daily_put(room, final=False)

    def _daily_leave(self, conn: int, room: RoomState, player: PlayerState, now: int) -> None:
        """``leave`` while an attempt runs: refused, the attempt holds its player until it ends (a
        player is in one room at a time). Closing the connection is how to come back later."""
        why = (
            "your daily attempt runs until its time limit: resign to end it now, or close the client and "
            "come back (the clock runs)"
        )
        self._error(conn, p.WRONG_PHASE, why, "leave")

    def _leave_finished(self, player: PlayerState, now: int) -> None:
        """Out of a daily room whose attempt is over (a new day's attempt, a replay, follows)."""
        old = self.rooms.get(player.room) if player.room is not None else None
        if old is not None and player.player_id in old.members:
            self._remove_member(old, player.player_id, now)
        else:
            self._save_player(player.player_id, None, player.name, player.bot, player.token_hash)
        player.room = None

    # ------------------------------------------------------------------ results to the board

    def _daily_progress(self, room: RoomState) -> None:
        """The leaderboard tick of an attempt: its row on the day's board when its figures changed."""
        kind = daily_room(room.code)
        if kind is not None and kind[0] == "ranked" and room.phase == p.RACING:
            self._daily_put(room, final=False)

    def _daily_put(self, room: RoomState, final: bool) -> None:
        kind = daily_room(room.code)
        race = room.race
        if kind is None or race is None or not race.racers:
            return
        _, day, profile = kind
        pid, racer = next(iter(race.racers.items()))
        game = racer.game
        status = game.status
        if final and status == PLAYING:
            status = p.STOPPED
        elapsed = racer.times[-1] if racer.times else 0
        figures = (game.foundation_cards, status, racer.log_length)
        if not final and self.daily.posted.get(room.code) == figures:
            return
        self.daily.posted[room.code] = figures
        row = DailyRowRecord(
            name=racer.info.name,
            claimed=True,
            status=status,
            cards=game.foundation_cards,
            moves=racer.log_length,
            elapsed_ms=elapsed,
            cards_ms=racer.cards_ms,
            player_id=pid,
        )
        score = board_score(status, row.cards, elapsed, racer.cards_ms)
        if not final:
            self._out.append(PutDailyRow(day, profile, score, encode(row)))
            return
        self.daily.posted.pop(room.code, None)
        record = self.daily.days.get(day)
        limit = record.time_limit_s if record is not None else self.config.daily_time_limit_s
        self._out.append(
            FinishDaily(
                day=day,
                profile_id=profile,
                name=racer.info.name,
                score=score,
                row=encode(row),
                record=encode(list(game.entries)),
                won=status == WON,
                cards=row.cards,
                elapsed_ms=elapsed,
                points=points(status, row.cards, elapsed, limit),
                then=ReadBoard(None, day, profile_id=profile, player_id=pid),
            )
        )

    def _daily_finalized(self, room: RoomState) -> None:
        """An attempt is over: its final leaderboard (never ``results``: the deal stays hidden until
        the reveal), and a ranked one's result to the day's board (the board follows)."""
        race = room.race
        assert race is not None
        self._send(room.member_ids(), self._end_message(room))
        kind = daily_room(room.code)
        if kind is not None and kind[0] == "ranked":
            self._daily_put(room, final=True)

    def _end_message(self, room: RoomState) -> p.ServerMessage:
        """What a finished race shows: its results, or for a daily room the final leaderboard."""
        race = room.race
        assert race is not None
        if daily_room(room.code) is None:
            return self._results(room)
        rows = race.final_rows if race.final_rows is not None else self._rows(race, final=True)
        return p.Leaderboard(race=race.record.number, version=race.total_entries, racers=rows)

    # ------------------------------------------------------------------ boards and profiles

    def _watch_daily(self, conn: int, watch: bool, now: int) -> None:
        daily = self.daily
        if not watch:
            daily.watchers.discard(conn)
            return
        daily.watchers.add(conn)
        today = day_of(now, self._day_s)
        record = daily.days.get(today)
        if record is not None:  # else both come once the day's record is known (the day clock's tick)
            self._reply(conn, day_message(record, self._day_s, now))
            self._out.append(ReadBoard(conn, today))
        self._daily_schedule(now)

    def _get_board(self, conn: int, player: PlayerState, msg: p.GetBoard, now: int) -> None:
        if msg.boards:
            why = "nobody sees anyone's board on the daily: its board shows cards, status and time only"
            self._error(conn, p.NO_BOARDS, why, "get_board")
            return
        today = day_of(now, self._day_s)
        day = today if msg.day is None else msg.day
        if day > today:
            self._error(conn, p.NO_DAY, f"day {day} has not begun: today is day {today}", "get_board")
            return
        self._out.append(ReadBoard(conn, day, msg.offset, records=day < today, profile_id=player.profile_id))

    def _daily_forget(self, conn: int) -> None:
        self.daily.watchers.discard(conn)

    def _send_watchers(self, message: p.ServerMessage) -> None:
        for conn in sorted(self.daily.watchers):
            if conn in self.conns:
                self._reply(conn, message)

    def _board_read(self, ev: BoardRead) -> None:
        daily = self.daily
        if ev.conn is None and ev.player_id is None:
            daily.watch_reading = False
        if ev.failed or ev.record is None:
            if ev.conn is not None and ev.conn in self.conns:
                if ev.failed:
                    self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: try again", "get_board")
                else:
                    self._error(ev.conn, p.NO_DAY, f"there is no record of day {ev.day}", "get_board")
            return
        message = board_message(
            ev.record, self._day_s, ev.rows, ev.total, ev.offset, ev.live, ev.records, ev.now, ev.you
        )
        if ev.player_id is not None:
            self._send((ev.player_id,), message)
        elif ev.conn is not None:
            if ev.conn in self.conns:
                self._reply(ev.conn, message)
        else:
            frame = _encoder.encode(message)
            if frame != daily.watch_last:
                daily.watch_last = frame
                self._send_watchers(message)

    def _profile_read(self, ev: ProfileRead) -> None:
        if ev.conn not in self.conns:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: try again", "get_player")
            return
        if ev.profile is None:
            self._error(ev.conn, p.UNKNOWN_PLAYER, f"nobody has claimed the name {ev.name!r}", "get_player")
            return
        self._reply(ev.conn, profile_message(ev, self._day_s))

    def _standing_read(self, ev: StandingRead) -> None:
        if ev.conn not in self.conns:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: try again", "get_standing")
            return
        self._reply(ev.conn, standing_message(ev))


def standing_message(ev: StandingRead) -> p.Standing:
    rows = [
        p.StandingRow(
            name=name,
            profile_id=pid,
            points=pts,
            days_played=played,
            days_won=won,
            best_streak=streak,
            rank=ev.offset + i + 1,
        )
        for i, (pid, name, pts, played, won, streak) in enumerate(ev.rows)
    ]
    return p.Standing(rows=rows, total=ev.total, offset=ev.offset)


def profile_message(ev: ProfileRead, day_seconds: int) -> p.PlayerProfile:
    """A claimed player's daily standing from what the store holds (the core and the JSON API)."""
    assert ev.profile is not None
    played, won, streak, best_streak, last_day, best_ms, best_cards, total = ev.stats or (0, 0, 0, 0, -1, -1, 0, 0)
    today = day_of(ev.now, day_seconds)
    history = []
    for day, data, rank, players in ev.history:
        row = decode_row(data)
        history.append(
            p.DailyResult(
                day=day,
                date=day_date(day, day_seconds),
                status=row.status,
                cards=row.cards,
                moves=row.moves,
                elapsed_ms=row.elapsed_ms,
                rank=rank,
                players=players,
            )
        )
    rating = ev.profile.rating
    return p.PlayerProfile(
        name=ev.profile.name,
        profile_id=ev.profile.profile_id,
        created_ms=ev.profile.created_ms,
        days_played=played,
        days_won=won,
        streak=streak if last_day >= today - 1 else 0,
        best_streak=best_streak,
        best_ms=None if best_ms < 0 else best_ms,
        best_cards=best_cards,
        points=total,
        history=history,
        rating=None if rating is None else float(rating.shown),
    )
