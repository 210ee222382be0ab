"""shared.protocol: every message round-trips, bad frames get the right code and name the field."""

from __future__ import annotations

import msgpack
import msgspec
import pytest

from shared import protocol as p
from shared.engine import Game, View, view_check


def _view() -> View:
    return Game(4242).view()


def _row(pid: str = "p1") -> p.LeaderboardRow:
    return p.LeaderboardRow(
        player_id=pid,
        name="Ann",
        bot=False,
        cards=3,
        moves=7,
        status="playing",
        elapsed_ms=1234,
        rank=1,
        connected=True,
    )


RULES = p.RoomRules(
    max_racers=4,
    undo=True,
    spectator_boards="after",
    private=False,
    time_limit=None,
    bots_allowed=True,
    winnable_only=False,
)

CLIENT_SAMPLES: list[p.ClientMessage] = [
    p.Hello(v=2, name="Ann"),
    p.Hello(v=2, name="Bot", token="abc", bot=True),
    p.CreateRoom(),
    p.CreateRoom(
        options=p.RoomOptions(
            deal=2**64 - 1,
            max_racers=16,
            undo=False,
            spectator_boards=30,
            private=True,
            time_limit=600,
            bots_allowed=False,
            winnable_only=True,
        )
    ),
    p.Join(code="ABCDE"),
    p.Join(code="ABCDE", role="spectator"),
    p.Leave(),
    p.ListRooms(),
    p.Ready(ready=False),
    p.Start(),
    p.Kick(player_id="p2"),
    p.EndRace(),
    p.Rematch(),
    p.Rematch(deal=7),
    p.Move(id=3, move="waste>t3"),
    p.Ping(t=99),
    p.Sync(),
    p.Chat(text="good luck 🍀"),
    p.Mute(player_id="p2"),
    p.Rematch(ghosts=True),
    p.AddGhost(name="Ann", deal=7, moves=["stock>waste", "waste>t3"], times=[900, 2100]),
    p.AddGhost(name="Ann", deal=7, undo=False, moves=["undo"], offset=1000, more=True),
    p.RemoveGhost(player_id="ghost:p1"),
    p.Mute(player_id="p2", muted=False),
    p.Hello(v=2, name="Ann", identity="s" * 43),
    p.Claim(name="Ann", identity="s" * 43),
    p.Rename(name="Anna"),
    p.GetRatings(),
    p.GetRatings(limit=100),
    p.GetRating(),
    p.GetRating(name="Ann"),
    p.Daily(),
    p.Daily(replay=True, day=20424),
    p.WatchDaily(),
    p.WatchDaily(watch=False),
    p.GetBoard(),
    p.GetBoard(day=20424, offset=100),
    p.GetPlayer(name="Ann"),
    p.GetStanding(offset=0),
]

SERVER_SAMPLES: list[p.ServerMessage] = [
    p.Welcome(player_id="p1", token="t", name="Ann", server_time=1, resumed=True, room="ABCDE"),
    p.Error(code=p.BAD_FIELD, message="field 'v' of hello: missing", ref="hello"),
    p.Room(
        code="ABCDE",
        version=3,
        host="p1",
        phase=p.LOBBY,
        race=1,
        rules=RULES,
        chosen_deal=False,
        leak_proof=True,
        members=[p.Member(player_id="p1", name="Ann", role=p.RACER, ready=True, bot=False, connected=True)],
    ),
    p.RoomList(
        rooms=[
            p.RoomSummary(
                code="ABCDE",
                host_name="Ann",
                phase=p.LOBBY,
                racers=1,
                max_racers=4,
                spectators=0,
                undo=True,
                chosen_deal=False,
                leak_proof=True,
                bots_allowed=True,
                time_limit=None,
            )
        ]
    ),
    p.Left(room="ABCDE"),
    p.Kicked(room="ABCDE", reason="host"),
    p.Countdown(race=1, starts_at=5000, server_time=2000),
    p.RaceStart(
        race=1,
        commitment="0" * 64,
        chosen_deal=False,
        started_at=5000,
        ends_at=None,
        undo=True,
        server_time=5000,
        view=_view(),
        seq=0,
        view_hash=Game(4242).view_hash(),
        check=Game(4242).check,
    ),
    p.RaceStart(
        race=1,
        commitment="0" * 64,
        chosen_deal=True,
        started_at=5000,
        ends_at=9000,
        undo=True,
        server_time=5000,
        view=None,
        seq=0,
        view_hash=None,
    ),
    p.MoveOk(id=1, seq=1, t_ms=10, check=7, view=_view(), duplicate=True),
    p.MoveOk(id=1, seq=1, t_ms=10, check=2**32 - 1, changes=[("waste", 0, [5]), ("t3", 1, [])], stock=77),
    p.MoveOk(id=9, seq=4, t_ms=10, check=0, changes=[("f0", 1, [9])], reserve=(12, None), status="won"),
    p.MoveRejected(id=2, code=p.ILLEGAL_MOVE, reason="no"),
    p.Leaderboard(race=1, version=9, racers=[_row(), _row("p2")]),
    p.Leaderboard(race=1, version=11, racers=[_row("p2")], partial=True),
    p.Boards(race=1, delay_ms=30000, as_of_ms=100, boards={"p1": _view()}),
    p.Results(
        race=1,
        ranking=["p1"],
        racers=[_row()],
        deal=2**64 - 1,
        salt="ab" * 32,
        commitment="c" * 64,
        chosen_deal=False,
        records={"p1": p.GameRecord(deal=2**64 - 1, moves=["stock>waste"], undo=False)},
    ),
    p.Pong(t=None, server_time=3),
    p.Shutdown(reason="restart", retry_after_ms=1000),
    p.ChatSaid(room="ABCDE", line=p.ChatLine(seq=1, player_id="p1", name="Ann", role="racer", text="gl", at=5)),
    p.ChatHistory(
        room="ABCDE",
        lines=[
            p.ChatLine(seq=2, player_id="p3", name="Zed", role="spectator", text="go", at=9, audience=p.TO_SPECTATORS)
        ],
    ),
    p.Finished(race=1, player_id="p1", name="Ann", status="won", place=1, cards=104, elapsed_ms=459_000),
    p.Welcome(player_id="p1", token="t", name="Ann", server_time=1, profile="pr1", claimed=True),
    p.Claimed(profile_id="pr1", name="Ann"),
    p.DailyDay(day=20424, date="2025-12-02", starts_at=0, ends_at=86_400_000, commitment="ab" * 32, time_limit_s=1800),
    p.DailyBoard(
        day=20424,
        rows=[
            p.DailyRow(
                name="Ann",
                claimed=True,
                profile_id="pr1",
                status="won",
                cards=104,
                moves=213,
                elapsed_ms=372_000,
                rank=1,
            )
        ],
        final=True,
        total=1,
        deal=7,
        salt="s" * 32,
        records={"Ann": ["stock>waste"]},
    ),
    p.PlayerProfile(
        name="Ann",
        profile_id="pr1",
        created_ms=1,
        days_played=3,
        days_won=2,
        streak=2,
        best_streak=2,
        best_ms=372_000,
        best_cards=104,
        points=500,
        history=[
            p.DailyResult(
                day=20424, date="2025-12-02", status="won", cards=104, moves=213, elapsed_ms=372_000, rank=1, players=41
            )
        ],
    ),
    p.Standing(
        rows=[
            p.StandingRow(name="Ann", profile_id="pr1", points=500, days_played=3, days_won=2, best_streak=2, rank=1)
        ],
        total=1,
    ),
    p.RatingBoard(rows=[p.RatingRow(rank=1, name="Ann", profile_id="pr1", shown=1012, certainty=8, races=1)]),
    p.RatingHistory(
        name="Ann",
        profile_id="pr1",
        rating=p.Rating(mu=27.0, sigma=7.9, shown=1132, certainty=5, races=1),
        history=[p.RatedRace(room="ABCDE", race=1, at=9, place=1, racers=2, before=1000, after=1132)],
    ),
    p.Results(
        race=2,
        ranking=["p1", "p2"],
        racers=[_row(), _row("p2")],
        deal=7,
        salt="ab" * 32,
        commitment="c" * 64,
        chosen_deal=True,
        records={},
        rated=True,
        ratings={"p1": p.RatingChange(before=p.Rating(), after=p.Rating(mu=27.6, sigma=8.0, shown=1144), change=144)},
    ),
]


def test_every_message_type_has_a_sample() -> None:
    assert {p.message_type(m) for m in CLIENT_SAMPLES} == set(p.CLIENT_TYPES)
    assert {p.message_type(m) for m in SERVER_SAMPLES} == set(p.SERVER_TYPES)


@pytest.mark.parametrize("message", CLIENT_SAMPLES, ids=lambda m: p.message_type(m))
def test_client_messages_round_trip(message: p.ClientMessage) -> None:
    frame = p.encode(message)
    assert p.decode_client(frame) == message
    raw = msgpack.unpackb(frame)  # a plain MessagePack library sees a map with a type field
    assert isinstance(raw, dict) and raw["type"] == p.message_type(message)


@pytest.mark.parametrize("message", SERVER_SAMPLES, ids=lambda m: p.message_type(m))
def test_server_messages_round_trip(message: p.ServerMessage) -> None:
    frame = p.encode(message)
    assert p.decode_server(frame) == message
    raw = msgpack.unpackb(frame)
    assert raw["type"] == p.message_type(message)


def test_a_plain_msgpack_client_message_decodes() -> None:
    frame = msgpack.packb({"type": "move", "id": 4, "move": "stock>waste", "extra": "ignored"})
    assert p.decode_client(frame) == p.Move(id=4, move="stock>waste")
    big = msgpack.packb({"type": "create_room", "options": {"deal": 2**64 - 1}})
    assert p.decode_client(big) == p.CreateRoom(options=p.RoomOptions(deal=2**64 - 1))


def _error(frame: bytes) -> p.ProtocolError:
    with pytest.raises(p.ProtocolError) as info:
        p.decode_client(frame)
    return info.value


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xc1",
        b"\x92\x01",
        msgpack.packb("hello"),
        msgpack.packb([1, 2]),
        msgpack.packb({"type": "ping"}) + b"\x00",
    ],
)
def test_malformed_frames(frame: bytes) -> None:
    assert _error(frame).code == p.MALFORMED


@pytest.mark.parametrize("value", [{}, {"type": "dance"}, {"type": 7}, {"type": None}, {"type": "welcome"}])
def test_unknown_types(value: dict[str, object]) -> None:
    err = _error(msgpack.packb(value))
    assert err.code == p.UNKNOWN_TYPE
    assert "type" in err.message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"type": "hello", "name": "x"}, "'v'"),
        ({"type": "hello", "v": "1", "name": "x"}, "'v'"),
        ({"type": "hello", "v": 1, "name": 5}, "'name'"),
        ({"type": "move", "move": "undo"}, "'id'"),
        ({"type": "move", "id": -1, "move": "undo"}, "'id'"),
        ({"type": "move", "id": 1, "move": ["undo"]}, "'move'"),
        ({"type": "join", "code": "ABCDE", "role": "referee"}, "'role'"),
        ({"type": "ready", "ready": "yes"}, "'ready'"),
        ({"type": "create_room", "options": {"max_racers": 1}}, "'options.max_racers'"),
        ({"type": "create_room", "options": {"max_racers": 17}}, "'options.max_racers'"),
        ({"type": "create_room", "options": {"spectator_boards": "live"}}, "'options.spectator_boards'"),
        ({"type": "create_room", "options": {"spectator_boards": -1}}, "'options.spectator_boards'"),
        ({"type": "create_room", "options": {"time_limit": 1}}, "'options.time_limit'"),
        ({"type": "create_room", "options": {"deal": -5}}, "'options.deal'"),
        ({"type": "create_room", "options": {"deal": "42"}}, "'options.deal'"),
        ({"type": "create_room", "options": {"colour": "red"}}, "'options.colour'"),
        ({"type": "kick"}, "'player_id'"),
    ],
)
def test_bad_fields_name_the_field(value: dict[str, object], field: str) -> None:
    err = _error(msgpack.packb(value))
    assert err.code == p.BAD_FIELD
    assert field in err.message
    assert err.ref == value["type"]
    assert err.to_message() == p.Error(code=p.BAD_FIELD, message=err.message, ref=err.ref)


def test_server_decoder_rejects_client_messages() -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.decode_server(p.encode(p.Ping()))
    assert info.value.code == p.UNKNOWN_TYPE


@pytest.mark.parametrize("name", ["A", "Ann Smith", "x" * 24, "Zoë", "北京", "a b"])
def test_good_names(name: str) -> None:
    assert p.check_name(name) is None


@pytest.mark.parametrize(
    "name", ["", "   ", "x" * 25, "evil\x1b[2J", "tab\there", "new\nline", "bell\x07", "zero\u200bwidth", "rtl\u202e"]
)
def test_bad_names(name: str) -> None:
    reason = p.check_name(name)
    assert reason is not None and reason


def test_room_codes() -> None:
    assert not set("01OIL") & set(p.ROOM_CODE_ALPHABET)
    assert p.normalize_room_code(" ab-c de ") == "ABCDE"
    assert p.is_room_code("ABCDE")
    assert not p.is_room_code("ABCD")
    assert not p.is_room_code("ABCD0")


def test_error_codes_are_unique_and_cover_the_brief() -> None:
    assert len(set(p.ERROR_CODES)) == len(p.ERROR_CODES)
    required = {
        "malformed",
        "unknown_type",
        "bad_field",
        "wrong_phase",
        "not_host",
        "illegal_move",
        "unknown_room",
        "room_full",
        "bad_token",
        "rate_limited",
        "unsupported_version",
        "name_invalid",
        "store_unavailable",
    }
    assert required <= set(p.ERROR_CODES)


def test_view_carries_no_hidden_fields() -> None:
    # The View struct is what a racer sees: a stock count, never the stock's cards, no deal number.
    fields = set(View.__struct_fields__)
    assert fields == {"stock", "waste", "reserve_top", "reserve_count", "foundations", "tableau", "status"}
    encoded = msgspec.msgpack.decode(p.encode(SERVER_SAMPLES[7]))
    assert isinstance(encoded["view"]["stock"], int)
    assert "deal" not in encoded


def test_a_small_move_ok_leaves_out_what_did_not_change() -> None:
    ok = p.MoveOk(id=1, seq=1, t_ms=10, check=3, changes=[("waste", 0, [5])], stock=77)
    raw = msgpack.unpackb(p.encode(ok))
    changes = [["waste", 0, [5]]]
    assert raw == {"type": "move_ok", "id": 1, "seq": 1, "t_ms": 10, "check": 3, "changes": changes, "stock": 77}
    whole = p.MoveOk(id=1, seq=1, t_ms=10, check=3, view=_view())
    assert len(p.encode(ok)) * 2 < len(p.encode(whole))


def test_the_check_value_of_the_documented_board() -> None:
    # docs/protocol.md, "The check value": the start of deal 14604373617339541229.
    game = Game(14604373617339541229)
    assert game.check == view_check(game.view()) == 2340067274


def test_a_board_keeper_follows_changes_and_catches_a_divergence() -> None:
    game = Game(4242)
    keeper = p.BoardKeeper()
    keeper.race_start(SERVER_SAMPLES[7])  # type: ignore[arg-type]
    touched = game.touched("stock>waste")
    lengths = tuple(game.pile_length(i) for i in touched)
    game.play("stock>waste")
    changes, stock, reserve = game.changes(touched, lengths)
    ok = p.MoveOk(id=1, seq=1, t_ms=5, check=game.check, changes=changes, stock=stock, reserve=reserve)
    assert keeper.move_ok(ok) == game.view() and keeper.seq == 1
    assert keeper.move_ok(ok) is None, "the same changes again: seq 1 after 1 is a gap"
    keeper.seq = 0
    bad = msgspec.structs.replace(ok, check=(ok.check + 1) % 2**32)
    assert keeper.move_ok(bad) is None, "a check value that does not match"
    assert keeper.move_ok(msgspec.structs.replace(ok, changes=[("t0", 9, [])])) is None, "a change that does not fit"
