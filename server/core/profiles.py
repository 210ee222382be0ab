"""Profiles and ratings in the room core (docs/players.md): a hello bound to a claimed name, claims,
renames, the rating queries, and a rated race's changes shown in its results.

The store steps are effects (LookupProfile, ClaimProfile, RenameProfile, RateRace, ReadRatings);
each comes back as an event. Where a step is a compare-and-set loop (a rename, a rated race), the
shell reads and writes and asks this module's pure functions (``plan_rename`` here,
server/core/ratings.py) for every decision, so the rule is the core's wherever it runs.
"""

from __future__ import annotations

import msgspec

from server.core.base import CoreBase
from server.core.events import (
    ClaimProfile,
    LookupProfile,
    LookupToken,
    ProfileClaimed,
    ProfileLooked,
    ProfileRenamed,
    RaceRated,
    RateRace,
    RatingsRead,
    ReadRatings,
    RegisterPlayer,
    RenameProfile,
    SavePlayer,
    Send,
)
from server.core.ratings import rated_racers
from server.core.records import PlayerRecord, ProfileRecord, hash_token
from server.core.state import PlayerState, RoomState
from shared import identity as ident
from shared import protocol as p
from shared.names import NameInvalid, display_name, name_key


def plan_rename(profile: ProfileRecord, raw: str, now: int) -> ProfileRecord | tuple[str, int, str]:
    """The profile renamed to ``raw`` at ``now``, or why not: (error code, ms to wait, reason)."""
    try:
        name = display_name(raw)
    except NameInvalid as exc:
        return p.NAME_INVALID, 0, str(exc)
    if name == profile.name:
        return p.BAD_FIELD, 0, f"field 'name' of rename: {name!r} is your name already"
    wait = ident.rename_wait_ms(profile.renamed_ms, now)
    if wait > 0:
        days = -(-wait // ident.DAY_MS)
        why = f"a claimed name changes at most once in 30 days: yours may change again in {days} day(s)"
        return ident.RENAME_TOO_SOON, wait, why
    key = name_key(name)
    kept = [(k, until) for k, until in profile.previous if until > now and k not in (key, profile.name_key)]
    previous = [(profile.name_key, now + ident.RESERVED_MS), *kept] if key != profile.name_key else kept
    return msgspec.structs.replace(profile, name=name, name_key=key, renamed_ms=now, previous=previous)


class ProfilesMixin(CoreBase):
    # ------------------------------------------------------------------ hello with an identity

    def _hello_identity(self, conn: int, msg: p.Hello) -> None:
        why = ident.check_secret(msg.identity or "")
        if why is not None:
            self._error(conn, p.BAD_IDENTITY, why, "hello")
            return
        if conn in self._hellos or conn in self._identity_hellos:
            self._error(conn, p.WRONG_PHASE, "your hello is being answered already", "hello")
            return
        self._identity_hellos[conn] = msg
        self._out.append(LookupProfile(conn, hash_token(msg.identity or "")))

    def _profile_looked(self, ev: ProfileLooked) -> None:
        msg = self._identity_hellos.pop(ev.conn, None)
        if msg is None or ev.conn not in self.conns or self.conns[ev.conn] is not None:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: say hello again", "hello")
            return
        if ev.record is None:
            why = "this identity is unknown on this server: forget it (plot identity forget) or claim a name again"
            self._error(ev.conn, p.BAD_IDENTITY, why, "hello")
            return
        if msg.token is None:
            self._register_bound(ev.conn, ev.record, msg.bot, ev.now)
            return
        self._hellos[ev.conn] = msg.token
        self._hello_profiles[ev.conn] = ev.record
        self._out.append(LookupToken(ev.conn, hash_token(msg.token)))

    def _register_bound(self, conn: int, profile: ProfileRecord, bot: bool, now: int) -> None:
        """A new player bound to the profile, showing its claimed name."""
        token = self.entropy.token()
        record = PlayerRecord(
            player_id=self.entropy.player_id(),
            name=profile.name,
            bot=bot,
            created_ms=now,
            profile_id=profile.profile_id,
        )
        self._out.append(RegisterPlayer(conn, record, hash_token(token), token, self.config.new_player_ttl_s))

    # ------------------------------------------------------------------ claim and rename

    def _claim(self, conn: int, player: PlayerState, msg: p.Claim, now: int) -> None:
        if player.room is not None:
            self._error(
                conn, p.WRONG_PHASE, f"leave room {player.room} first: names are claimed outside rooms", "claim"
            )
            return
        if player.profile_id is not None:
            why = f"you have claimed {player.name!r} already: rename changes it"
            self._error(conn, p.WRONG_PHASE, why, "claim")
            return
        if player.bot:
            self._error(conn, p.WRONG_PHASE, "a bot cannot claim a name", "claim")
            return
        bad = ident.check_secret(msg.identity)
        if bad is not None:
            self._error(conn, p.BAD_IDENTITY, bad, "claim")
            return
        try:
            name = display_name(msg.name)
        except NameInvalid as exc:
            self._error(conn, p.NAME_INVALID, str(exc), "claim")
            return
        if conn in self._profile_ops:
            self._error(conn, p.WRONG_PHASE, "your claim is being answered already", "claim")
            return
        record = ProfileRecord(
            profile_id="pf" + self.entropy.player_id(), name=name, name_key=name_key(name), created_ms=now
        )
        self._profile_ops[conn] = player.player_id
        self._out.append(ClaimProfile(conn, hash_token(msg.identity), record))

    def _profile_player(self, conn: int) -> PlayerState | None:
        pid = self._profile_ops.pop(conn, None)
        if pid is None or self.conns.get(conn) != pid:
            return None
        return self.players.get(pid)

    def _profile_claimed(self, ev: ProfileClaimed) -> None:
        player = self._profile_player(ev.conn)
        if player is None:
            return
        if ev.outcome == "failed":
            why = "the store did not answer: claim again (the same name with the same secret finds a claim that landed)"
            self._error(ev.conn, p.STORE_UNAVAILABLE, why, "claim")
        elif ev.outcome == "created":
            self._bind_profile(ev.conn, player, ev.record, "claim")
        elif ev.existing is not None and ev.existing.name_key == ev.record.name_key:
            self._bind_profile(ev.conn, player, ev.existing, "claim")  # a claim retried after a lost answer
        elif ev.existing is not None:
            why = f"this identity has claimed {ev.existing.name!r} already: say hello with it (rename changes it)"
            self._error(ev.conn, p.WRONG_PHASE, why, "claim")
        else:
            why = f"{ev.record.name!r} is claimed on this server (or a name that looks the same): pick another"
            self._error(ev.conn, p.NAME_CLAIMED, why, "claim")

    def _bind_profile(self, conn: int, player: PlayerState, profile: ProfileRecord, ref: str) -> None:
        player.profile_id = profile.profile_id
        player.name = profile.name
        self._out.append(SavePlayer(player.record(), player.token_hash))
        self._reply(conn, p.Claimed(profile_id=profile.profile_id, name=profile.name))
        self._note("profile_" + ("claimed" if ref == "claim" else "renamed"), player=player.player_id)

    def _rename(self, conn: int, player: PlayerState, msg: p.Rename) -> None:
        if player.profile_id is None:
            self._error(conn, p.NOT_CLAIMED, "only a claimed name can be renamed: claim one first", "rename")
            return
        if player.room is not None:
            self._error(conn, p.WRONG_PHASE, f"leave room {player.room} first: names change outside rooms", "rename")
            return
        if conn in self._profile_ops:
            self._error(conn, p.WRONG_PHASE, "your rename is being answered already", "rename")
            return
        try:
            display_name(msg.name)
        except NameInvalid as exc:
            self._error(conn, p.NAME_INVALID, str(exc), "rename")
            return
        self._profile_ops[conn] = player.player_id
        self._out.append(RenameProfile(conn, player.profile_id, msg.name))

    def _profile_renamed(self, ev: ProfileRenamed) -> None:
        player = self._profile_player(ev.conn)
        if player is None:
            return
        if ev.outcome == "renamed" and ev.record is not None:
            self._bind_profile(ev.conn, player, ev.record, "rename")
        elif ev.outcome == "taken":
            why = "that name is claimed on this server (or a name that looks the same): pick another"
            self._error(ev.conn, p.NAME_CLAIMED, why, "rename")
        elif ev.outcome == "refused":
            self._error(ev.conn, ev.code, ev.reason, "rename")
        elif ev.outcome == "gone":
            self._error(ev.conn, p.NOT_CLAIMED, "your profile is not on this server any more", "rename")
        else:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: rename again", "rename")

    # ------------------------------------------------------------------ rating queries

    def _get_ratings(self, conn: int, msg: p.GetRatings) -> None:
        self._out.append(ReadRatings(conn, limit=msg.limit))

    def _get_rating(self, conn: int, player: PlayerState, msg: p.GetRating) -> None:
        if msg.name is None:
            if player.profile_id is None:
                self._error(conn, p.NOT_CLAIMED, "you have no claimed name: ask for one by name", "get_rating")
                return
            self._out.append(ReadRatings(conn, profile_id=player.profile_id))
            return
        try:
            name = display_name(msg.name)
        except NameInvalid as exc:
            self._error(conn, p.NAME_INVALID, str(exc), "get_rating")
            return
        self._out.append(ReadRatings(conn, name_key=name_key(name)))

    def _ratings_read(self, ev: RatingsRead) -> None:
        if ev.conn not in self.conns or self.conns[ev.conn] is None:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: ask again", None)
        elif ev.board is not None:
            self._reply(ev.conn, p.RatingBoard(rows=ev.board))
        elif ev.profile is None:
            self._error(ev.conn, p.UNKNOWN_PLAYER, "no claimed name like that on this server", "get_rating")
        else:
            pr = ev.profile
            rating = pr.rating or p.Rating()
            self._reply(
                ev.conn, p.RatingHistory(name=pr.name, profile_id=pr.profile_id, rating=rating, history=pr.history)
            )

    # ------------------------------------------------------------------ rated races

    def _rate_when_stored(self, room: RoomState, phase: str, race_number: int) -> None:
        """A save of the room landed: once its ended race is stored, a rated race is applied to
        its racers' profiles (once; a node that ends a race is the one whose save landed)."""
        race = room.race
        if race is None or phase != p.RESULTS or race.record.number != race_number:
            return
        rec = race.record
        key = (room.code, rec.number)
        if not rec.rated or rec.ratings or rec.ended_at is None or key in self._rating:
            return
        rows = race.final_rows if race.final_rows is not None else self._rows(race, final=True)
        infos = {r.player_id: r for r in rec.racers}
        ranking = [
            (row.player_id, infos[row.player_id].profile_id, row.bot, row.rank)
            for row in rows
            if row.player_id in infos
        ]
        racers = rated_racers(ranking)
        if len(racers) < 2:
            return
        self._rating.add(key)
        self._out.append(RateRace(room.code, rec.number, rec.ended_at, tuple(racers)))

    def _race_rated(self, ev: RaceRated) -> None:
        self._rating.discard((ev.code, ev.race))
        room = self.rooms.get(ev.code)
        if ev.failed:
            self._note("race_rating_failed", room=ev.code, race=ev.race, level="warning")
            return
        if room is None or room.race is None or room.race.record.number != ev.race or room.phase != p.RESULTS:
            return
        room.race.record.ratings = dict(ev.ratings)
        room.version += 1
        room.needs_save = True
        self._touched.add(room.code)
        self._note("race_rated", room=ev.code, race=ev.race, racers=len(ev.ratings))
        # The results again, now with the changes: after the save, as the first results went.
        room.after_save.append(Send(room.member_ids(), self._results(room)))
