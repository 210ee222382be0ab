"""Claimed names end to end (docs/players.md): a real server on a loopback port, real WebSocket
clients, the in-memory store and a real Redis. Claims, hellos bound to a profile, look-alikes
refused, renames, the per-address claim limit, the claimed mark in rooms, leaderboards and chat,
and a claimed player resumed on another connection and after a restart on Redis."""

from __future__ import annotations

import secrets
from dataclasses import replace

import pytest
from support import Client, fast_config, latest, running_server, start_race

from server.limits import LimitsConfig
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p


def new_secret() -> str:
    return secrets.token_urlsafe(32)


async def hello(server: object, name: str, identity: str | None = None, token: str | None = None) -> Client:
    client = await Client.open(server, name)  # type: ignore[arg-type]
    await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=name, identity=identity, token=token))
    reply = await client.expect(p.Welcome | p.Error)  # type: ignore[arg-type]
    if isinstance(reply, p.Welcome):
        client.welcome = reply
    return client


async def claim(client: Client, name: str, identity: str) -> p.Claimed | p.Error:
    await client.send(p.Claim(name=name, identity=identity))
    reply = await client.expect(p.Claimed | p.Error)  # type: ignore[arg-type]
    assert isinstance(reply, p.Claimed | p.Error)
    return reply


async def claimed_player(server: object, name: str) -> tuple[Client, str]:
    """A player who claimed ``name``, then said hello again bound to it (a fresh connection)."""
    secret = new_secret()
    first = await hello(server, "someone")
    answer = await claim(first, name, secret)
    assert isinstance(answer, p.Claimed), answer
    await first.close()
    bound = await hello(server, "ignored", identity=secret)
    assert bound.welcome is not None and bound.welcome.claimed
    return bound, secret


async def test_a_claim_binds_the_player_and_a_later_hello_with_the_secret_is_that_profile() -> None:
    async with running_server() as server:
        secret = new_secret()
        ann = await hello(server, "ann")
        assert ann.welcome is not None and not ann.welcome.claimed and ann.welcome.profile is None  # unclaimed as ever
        answer = await claim(ann, "  Ann  ", secret)
        assert isinstance(answer, p.Claimed) and answer.name == "Ann"
        again = await hello(server, "whatever I type", identity=secret)
        welcome = again.welcome
        assert welcome is not None
        assert (welcome.name, welcome.profile, welcome.claimed) == ("Ann", answer.profile_id, True)
        assert welcome.player_id != ann.pid  # a new seat token, the same profile
        # the same claim again (an answer lost on the way): the same profile, nothing new
        retry = await hello(server, "x")
        assert await claim(retry, "ann", secret) == p.Claimed(profile_id=answer.profile_id, name="Ann")
        # the secret never travels back: no frame the server sent holds it
        for client in (ann, again, retry):
            assert all(secret.encode() not in frame for frame in client.frames)


@pytest.mark.parametrize("look_alike", ["alice", "ALICE", "аlice", "ＡＬＩＣＥ", "alıce", " Alice "])
async def test_a_look_alike_of_a_claimed_name_is_refused(look_alike: str) -> None:
    async with running_server() as server:
        await claimed_player(server, "Alice")
        other = await hello(server, "mallory")
        answer = await claim(other, look_alike, new_secret())
        assert isinstance(answer, p.Error) and answer.code == p.NAME_CLAIMED, answer
        assert answer.ref == "claim"
        # the refused client can still play unclaimed, under any name it likes
        assert other.welcome is not None and not other.welcome.claimed
        await other.send(p.CreateRoom())
        assert (await other.expect(p.Room)).members[0].claimed is False


async def test_bad_claims_and_identities_answer_clear_codes() -> None:
    async with running_server() as server:
        bob, _ = await claimed_player(server, "Bob")
        client = await hello(server, "x")
        cases: list[tuple[p.ClientMessage, str]] = [
            (p.Claim(name="Carol", identity="short"), p.BAD_IDENTITY),
            (p.Claim(name="Carol", identity="!" * 43), p.BAD_IDENTITY),
            (p.Claim(name="", identity=new_secret()), p.NAME_INVALID),
            (p.Claim(name="a\u200bb", identity=new_secret()), p.NAME_INVALID),
            (p.Rename(name="Zed"), p.NOT_CLAIMED),
        ]
        for msg, code in cases:
            await client.send(msg)
            error = await client.expect(p.Error)
            assert error.code == code, (msg, error)
        # an unknown identity at hello: bad_identity (the client offers to forget it)
        stranger = await hello(server, "y", identity=new_secret())
        assert stranger.welcome is None
        assert latest(stranger, p.Error).code == p.BAD_IDENTITY
        malformed = await hello(server, "y", identity="tiny")
        assert latest(malformed, p.Error).code == p.BAD_IDENTITY
        # claiming twice, and claiming inside a room: wrong_phase
        await bob.send(p.Claim(name="Bobby", identity=new_secret()))
        assert (await bob.expect(p.Error)).code == p.WRONG_PHASE
        await client.send(p.CreateRoom())
        await client.expect(p.Room)
        await client.send(p.Claim(name="Carol", identity=new_secret()))
        assert (await client.expect(p.Error)).code == p.WRONG_PHASE
        # a frame whose identity is longer than any secret: bad_field
        await client.send(p.Claim(name="Carol", identity="a" * 200))
        assert (await client.expect(p.Error)).code == p.BAD_FIELD


async def test_rename_once_then_too_soon_and_the_old_name_stays_reserved() -> None:
    async with running_server() as server:
        ann, secret = await claimed_player(server, "Ann")
        await ann.send(p.Rename(name="Anna"))
        renamed = await ann.expect(p.Claimed)
        assert renamed.name == "Anna"
        await ann.send(p.Rename(name="Annabel"))
        error = await ann.expect(p.Error)
        assert error.code == p.RENAME_TOO_SOON and "30 days" in error.message
        # the old name is reserved for its owner: nobody else may claim it (or a look-alike)
        other = await hello(server, "z")
        assert isinstance(taken := await claim(other, "ANN", new_secret()), p.Error)
        assert taken.code == p.NAME_CLAIMED
        assert isinstance(taken := await claim(other, "anna", new_secret()), p.Error)
        assert taken.code == p.NAME_CLAIMED
        # a hello with the secret shows the new name
        back = await hello(server, "q", identity=secret)
        assert back.welcome is not None and back.welcome.name == "Anna"


async def test_claims_per_address_per_hour() -> None:
    limits = replace(LimitsConfig.per_address_off(), claims_per_hour=2)
    async with running_server(config=fast_config(limits=limits)) as server:
        client = await hello(server, "x")
        assert isinstance(await claim(client, "One", new_secret()), p.Claimed)
        other = await hello(server, "y")
        refused = await claim(other, "One", new_secret())  # refused, and it still counts
        assert isinstance(refused, p.Error) and refused.code == p.NAME_CLAIMED
        third = await hello(server, "z")
        limited = await claim(third, "Three", new_secret())
        assert isinstance(limited, p.Error) and limited.code == p.CLAIM_LIMIT and "an hour" in limited.message


async def test_rooms_leaderboards_and_chat_mark_claimed_names() -> None:
    async with running_server() as server:
        ann, _ = await claimed_player(server, "Ann")
        bob = await hello(server, "Bob")
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        await bob.send(p.Join(code=code))
        room = await bob.expect(p.Room)
        marks = {m.name: m.claimed for m in room.members}
        assert marks == {"Ann": True, "Bob": False}
        await bob.send(p.Ready(ready=True))
        await ann.send(p.Chat(text="hi"))
        said = await bob.expect(p.ChatSaid)
        assert (said.line.name, said.line.claimed) == ("Ann", True)
        await bob.send(p.Chat(text="hello"))
        said = await ann.expect(p.ChatSaid)
        while said.line.name != "Bob":
            said = await ann.expect(p.ChatSaid)
        assert said.line.claimed is False
        await start_race([ann, bob])
        board = await bob.expect(p.Leaderboard)
        assert {r.name: r.claimed for r in board.racers} == {"Ann": True, "Bob": False}


async def test_a_claimed_name_in_a_room_refuses_an_unclaimed_look_alike() -> None:
    async with running_server() as server:
        ann, _ = await claimed_player(server, "Ann")
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        fake = await hello(server, "Аnn")  # Cyrillic А: allowed as an unclaimed name, not beside Ann
        await fake.send(p.Join(code=code))
        assert (await fake.expect(p.Error)).code == p.NAME_TAKEN


async def test_a_claimed_player_resumes_on_another_connection_and_after_a_restart_on_redis(redis_url: str) -> None:
    config = fast_config()
    async with running_server(RedisStore(redis_url), config) as server:
        ann, secret = await claimed_player(server, "Ann")
        assert ann.welcome is not None
        profile, token = ann.welcome.profile, ann.welcome.token
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        # another connection with the seat's token and the identity: the same player, its seat back
        second = await hello(server, "?", identity=secret, token=token)
        assert second.welcome is not None
        assert (second.welcome.resumed, second.welcome.room, second.welcome.profile) == (True, code, profile)
    # a new server process on the same Redis: the profile and the seat are still there
    async with running_server(RedisStore(redis_url), config) as server:
        third = await hello(server, "?", identity=secret, token=token)
        welcome = third.welcome
        assert welcome is not None
        assert (welcome.name, welcome.profile, welcome.claimed, welcome.resumed) == ("Ann", profile, True, True)
        room = await third.expect(p.Room)
        assert [(m.name, m.claimed) for m in room.members] == [("Ann", True)]
        # a hello with only the identity: a new seat of the same profile
        fresh = await hello(server, "?", identity=secret)
        assert fresh.welcome is not None and fresh.welcome.profile == profile and not fresh.welcome.resumed
        # the name stays claimed across the restart
        other = await hello(server, "m")
        refused = await claim(other, "аnn", new_secret())
        assert isinstance(refused, p.Error) and refused.code == p.NAME_CLAIMED


async def test_a_token_of_another_player_with_an_identity_starts_a_new_seat_of_the_profile() -> None:
    async with running_server(MemoryStore()) as server:
        _, secret = await claimed_player(server, "Ann")
        plain = await hello(server, "Bob")
        assert plain.welcome is not None
        mixed = await hello(server, "?", identity=secret, token=plain.welcome.token)
        assert mixed.welcome is not None
        assert mixed.welcome.player_id != plain.pid and mixed.welcome.name == "Ann" and mixed.welcome.claimed
