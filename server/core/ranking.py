"""Ranking (docs/rules.md), leaderboards and results."""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.state import (
    LeaderboardFeed,
    RaceState,
    RoomState,
)
from shared import protocol as p
from shared.engine import PLAYING, WON


class RankingMixin(CoreBase):
    def _rows(self, race: RaceState, final: bool) -> list[p.LeaderboardRow]:
        """The race's rows in rank order. While it runs (``final`` false) its ghosts' rows are among
        them (docs/ghosts.md: marked, ranked without taking a live racer's place); the final rows
        are the racers' alone (the results carry the ghosts' apart)."""
        keyed = self._ranked(race, final)
        rows = [row for _, row in keyed]
        if final or not race.ghosts:
            return rows
        rows += self._ghost_rows(race, [key for key, _ in keyed])
        rows.sort(key=p.row_order)
        return rows

    def _ranked(self, race: RaceState, final: bool) -> list[tuple[tuple[int, int, int, int], p.LeaderboardRow]]:
        """The racers' rows with their ranking keys, ranked."""
        keyed: list[tuple[tuple[int, int, int, int], p.LeaderboardRow]] = []
        for seat, (pid, racer) in enumerate(race.racers.items()):
            game = racer.game
            status = game.status
            if final and status == PLAYING:
                status = p.STOPPED
            elapsed = racer.times[-1] if racer.times else 0
            cards = game.foundation_cards
            # docs/rules.md, Race ranking: winners by the time of their winning move; then by cards, most first,
            # ties by the time the count was last reached. Seat order settles exact ties.
            key = (0, elapsed, 0, seat) if game.status == WON else (1, -cards, racer.cards_ms, seat)
            row = p.LeaderboardRow(
                player_id=pid,
                name=racer.info.name,
                bot=racer.info.bot,
                cards=cards,
                moves=racer.log_length,
                status=status,
                elapsed_ms=elapsed,
                rank=0,
                connected=self._present((race.members or {}).get(pid), pid),
                claimed=racer.info.profile_id is not None,
            )
            keyed.append((key, row))
        keyed.sort(key=lambda kr: kr[0])
        for i, (_, row) in enumerate(keyed):
            row.rank = i + 1
        return keyed

    def _leaderboard(self, race: RaceState, final: bool) -> p.Leaderboard:
        return p.Leaderboard(race=race.record.number, version=race.total_entries, racers=self._rows(race, final))

    def _leaderboard_update(
        self, race: RaceState, feed: LeaderboardFeed, rows: list[p.LeaderboardRow], now: int
    ) -> p.Leaderboard | None:
        """The coalesced leaderboard of one audience's tick, from the race's ranked ``rows``: the
        rows whose shown figures (cards, status, rank, connected) changed since ``feed`` last sent
        them (``partial``), None when none did; the whole one when the feed sent none yet in this
        race or its last whole one is ``leaderboard_full_ms`` old."""
        sent = feed.sent
        whole = not sent or now - self._slot(feed.full_ms) >= self.config.leaderboard_full_ms
        changed: list[p.LeaderboardRow] = []
        for row in rows:
            figures = (row.cards, row.status, row.rank, row.connected)
            if sent.get(row.player_id) != figures:
                sent[row.player_id] = figures
                changed.append(row)
        if whole:
            feed.full_ms = now
            feed.stale = False
            return p.Leaderboard(race=race.record.number, version=race.total_entries, racers=rows)
        # The rows not sent show older moves and times: a whole one follows leaderboard_full_ms
        # after the last (the deadline table), however quiet the race is by then.
        feed.stale = True
        if not changed:
            return None
        return p.Leaderboard(race=race.record.number, version=race.total_entries, racers=changed, partial=True)

    def _results(self, room: RoomState) -> p.Results:
        race = room.race
        assert race is not None
        rec = race.record
        rows = race.final_rows if race.final_rows is not None else self._rows(race, final=True)
        records = {
            pid: p.GameRecord(deal=rec.deal, moves=list(r.game.entries), undo=rec.undo)
            for pid, r in race.racers.items()
        }
        return p.Results(
            race=rec.number,
            ranking=[row.player_id for row in rows],
            racers=rows,
            deal=rec.deal,
            salt=rec.salt,
            commitment=rec.commitment,
            chosen_deal=rec.chosen_deal,
            records=records,
            times={pid: list(r.times) for pid, r in race.racers.items()},
            ghosts=self._ghost_results(race, [key for key, _ in self._ranked(race, final=True)]) if race.ghosts else [],
            ghost_records={
                pid: p.GameRecord(deal=rec.deal, moves=list(g.record.moves), undo=g.record.undo)
                for pid, g in race.ghosts.items()
            },
            ghost_times={pid: list(g.record.times) for pid, g in race.ghosts.items()},
            rated=rec.rated,
            ratings=dict(rec.ratings),
        )
