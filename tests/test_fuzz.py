"""The fuzzing campaign's short run: frames through the real decoder and the real room
core, effects carried out against a real MemoryStore, the invariants checked after every frame
(server/testing/fuzzing.py). The long run is ``bench/fuzz.py --frames 1000000 --seed N``.

Three parts: a seeded campaign of generated and mutated frames (with coverage checks, so a
generator that stopped reaching races would fail here); hypothesis-made frames fed into a world
the seeded generator has set up; and planted bugs (a leak, an acknowledgement without a write, a
crash) that the campaign must report, so a clean run means something. Plus the two bugs the
fuzzer found, as regressions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import phase_of

from server.core import CoreConfig, Entropy, ServerCore
from server.core.events import Effect, Event, MovePersisted, PersistMove, Reply, Send
from server.core.records import decode_room
from server.store.memory import MemoryStore
from server.testing.fuzzing import FuzzDriver, StoreFaults, run_campaign, run_now
from shared import protocol as p

# ---------------------------------------------------------------- the seeded campaign


def test_a_short_campaign_keeps_every_invariant() -> None:
    result = run_campaign(4000, seed=2026, episode_frames=2000)
    assert [f.describe() for f in result.failures] == []
    assert result.frames == 4000
    counts = result.stats.counts
    # The frames reached every message type, every decoder error, and whole races.
    for kind in p.CLIENT_TYPES:
        assert counts[f"in:{kind}"] > 0, kind
    for code in (p.MALFORMED, p.UNKNOWN_TYPE, p.BAD_FIELD):
        assert counts[f"decode:{code}"] > 20, code
    assert counts["frames:valid"] > 2000 and counts["frames:fields"] > 300 and counts["frames:bytes"] > 300
    assert counts["out:move_ok"] > 1000 and counts["out:move_rejected"] > 20
    assert counts["note:race_results"] > 3 and counts["out:results"] > 3
    # The invariants looked at real content.
    assert result.stats.views_checked > 1000
    assert result.stats.replays_checked > 500 and result.stats.full_replays > 0


def test_a_short_stress_campaign_keeps_every_invariant() -> None:
    # Ten clients, five times the store faults, restarts: what the long --stress run does.
    result = run_campaign(3000, seed=31, episode_frames=1500, stress=True)
    assert [f.describe() for f in result.failures] == []
    counts = result.stats.counts
    assert counts["restarts"] > 0 and counts["rooms_loaded"] > 0
    assert counts["fault:append_lost"] > 0 and counts["fault:append_uncertain"] > 0 and counts["fault:defer"] > 50
    assert counts["fault:read_fails"] > 0 and counts["error:store_unavailable"] > 0  # token, room, list reads
    assert counts["out:move_ok"] > 300


def test_the_incremental_replay_agrees_with_engine_replay_after_every_frame() -> None:
    # full_replay_every=1: every racer's log replayed from scratch with engine.replay each frame.
    result = run_campaign(800, seed=77, episode_frames=800, full_replay_every=1)
    assert [f.describe() for f in result.failures] == []
    assert result.stats.full_replays > 300


def test_a_campaign_is_reproducible_from_its_seed_and_a_frame_index() -> None:
    whole = run_campaign(1200, seed=9, episode_frames=600)
    again = run_campaign(1200, seed=9, episode_frames=600)
    assert whole.stats.counts == again.stats.counts
    # Starting mid-episode replays that episode up to the frame: the same world, the same counts.
    tail = run_campaign(1200, seed=9, episode_frames=600, start_frame=900)
    assert tail.frames == 300
    assert tail.stats.counts == whole.stats.counts - run_campaign(600, seed=9, episode_frames=600).stats.counts


# ---------------------------------------------------------------- hypothesis-made frames

NAMES = st.text(max_size=30) | st.sampled_from(["Ann", "Bob", "", " ", "\x1b[31m", "A" * 25])
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
ANY_VALUE: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | INTS | st.floats() | st.text(max_size=40) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def field_value(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the field's own type, sometimes anything at all."""
    return st.one_of(valid, valid, valid, ANY_VALUE)


OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "deal": field_value(INTS),
        "max_racers": field_value(st.integers(0, 20)),
        "undo": field_value(st.booleans()),
        "spectator_boards": field_value(st.sampled_from(["after", 0, 1, 3600, 3601, -1])),
        "private": field_value(st.booleans()),
        "time_limit": field_value(st.none() | st.integers(0, 100_000)),
        "bots_allowed": field_value(st.booleans()),
        "winnable_only": field_value(st.booleans()),
    },
)
MOVES = st.sampled_from(["stock>waste", "waste>t0", "t3>f1", "reserve>f0", "undo", "resign", "t0>t0", "f0>t1"])


def message(kind: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    fields = {name: field_value(value) for name, value in required.items()}
    extra = {name: field_value(value) for name, value in (optional or {}).items()}
    return st.fixed_dictionaries({"type": st.just(kind), **fields}, optional=extra)


CLIENT_MESSAGES: st.SearchStrategy[Any] = st.one_of(
    message("hello", {"v": st.integers(0, 2), "name": NAMES}, {"token": st.text(max_size=140), "bot": st.booleans()}),
    message("create_room", {}, {"options": OPTIONS}),
    message("join", {"code": st.text(alphabet="2345ABCDE-", max_size=8)}, {"role": st.sampled_from(["racer", "x"])}),
    message("leave", {}),
    message("list_rooms", {}),
    message("ready", {}, {"ready": st.booleans()}),
    message("start", {}),
    message("kick", {"player_id": st.text(max_size=70)}),
    message("end_race", {}),
    message("rematch", {}, {"deal": st.none() | INTS}),
    message("move", {"id": st.integers(-1, 2**63), "move": MOVES}),
    message("ping", {}, {"t": st.none() | INTS}),
)  # fmt: skip


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A client message (fields of every type, extra fields), or bytes cut, flipped or random."""
    data = msgspec.msgpack.encode(draw(CLIENT_MESSAGES))
    how = draw(st.sampled_from(["valid", "valid", "valid", "cut", "flip", "random", "extra"]))
    if how == "cut":
        return data[: draw(st.integers(0, len(data)))]
    if how == "flip":
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1 :]
    if how == "random":
        return draw(st.binary(max_size=64))
    if how == "extra":
        return msgspec.msgpack.encode({**msgspec.msgpack.decode(data), draw(st.text(max_size=8)): draw(ANY_VALUE)})
    return data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), frames()), min_size=1, max_size=25))
def test_hypothesis_frames_keep_every_invariant(sent: list[tuple[int, bytes]]) -> None:
    driver = FuzzDriver("hypothesis")
    for _ in range(200):  # rooms, racers mid-race, spectators: the frames land in a living world
        assert driver.step() == []
    conns = [slot.conn for slot in driver.slots if slot.conn is not None] or [1]
    for which, frame in sent:
        assert driver.feed(conns[which % len(conns)], frame) == []
    assert driver.finish() == []


# ---------------------------------------------------------------- planted bugs the campaign must catch


def racer_game_stock(core: ServerCore, player_id: str) -> list[int] | None:
    for room in core.rooms.values():
        if room.race is not None and player_id in room.race.racers:
            return room.race.racers[player_id].game.stock
    return None


class PeekingCore(ServerCore):
    """Leak: every acknowledgement shows the next stock card on the racer's waste."""

    def handle(self, event: Event) -> list[Effect]:
        effects = super().handle(event)
        for effect in effects:
            if isinstance(effect, Send) and isinstance(effect.message, p.MoveOk):
                stock = racer_game_stock(self, effect.players[0])
                if stock:
                    effect.message.changes.append(("waste", 0, [stock[-1]]))
        return effects


class TellingCore(ServerCore):
    """Leak: a pong carries the deal number of a race under way."""

    def handle(self, event: Event) -> list[Effect]:
        effects = super().handle(event)
        racing = [r.race.record.deal for r in self.rooms.values() if r.phase == p.RACING and r.race is not None]
        return [
            Reply(e.conn, p.Pong(t=racing[0], server_time=0))
            if racing and isinstance(e, Reply) and isinstance(e.message, p.Pong)
            else e
            for e in effects
        ]


class HastyCore(ServerCore):
    """Acknowledges moves without writing them: the racer's game runs ahead of its stored log."""

    def handle(self, event: Event) -> list[Effect]:
        out: list[Effect] = []
        for effect in super().handle(event):
            if isinstance(effect, PersistMove):
                out.extend(
                    self.handle(
                        MovePersisted(effect.code, effect.race, effect.player_id, effect.expected_length + 1, 0)
                    )
                )
            else:
                out.append(effect)
        return out


class SilentCore(ServerCore):
    """Never answers an illegal move: a client waits for ever for its answer."""

    def handle(self, event: Event) -> list[Effect]:
        effects = super().handle(event)
        return [
            e
            for e in effects
            if not (isinstance(e, Reply) and isinstance(e.message, p.MoveRejected) and e.message.code == p.ILLEGAL_MOVE)
        ]


class FragileCore(ServerCore):
    """Crashes on a kick of an unknown player."""

    def handle(self, event: Event) -> list[Effect]:
        msg = getattr(event, "msg", None)
        if isinstance(msg, p.Kick) and msg.player_id == "p0":
            raise KeyError(msg.player_id)
        return super().handle(event)


@pytest.mark.parametrize(
    ("core", "kind", "words"),
    [
        (PeekingCore, "leak", "hidden cards"),
        (TellingCore, "leak", "deal number"),
        (HastyCore, "replay", "not the replay of its log"),
        (FragileCore, "exception", "KeyError"),
        (SilentCore, "answer", "was never answered"),
    ],
)
def test_a_planted_bug_is_reported_with_a_reproducer(core: type[ServerCore], kind: str, words: str) -> None:
    def factory(config: CoreConfig, entropy: Entropy) -> ServerCore:
        return core(config, entropy)

    result = run_campaign(6000, seed=3, episode_frames=3000, max_failures=1, core_factory=factory)
    assert result.failures, f"the campaign missed the bug planted in {core.__name__}"
    failure = result.failures[0]
    assert failure.kind == kind and words in failure.detail, failure.describe()
    assert f"--seed 3 --frames {failure.frame + 1} --start-frame {failure.frame}" in failure.reproducer()
    # The reproducer does reproduce it: the same frame breaks the same invariant.
    again = run_campaign(
        failure.frame + 1, seed=3, episode_frames=3000, start_frame=failure.frame, max_failures=1, core_factory=factory
    )
    assert again.failures and {(f.frame, f.kind) for f in again.failures} == {(failure.frame, failure.kind)}


# ---------------------------------------------------------------- what the fuzzer found


@pytest.mark.parametrize(
    "nested", [b"\x91" * 3000 + b"\xc0", b"\x82\xa4type\xa4ping\xa1x" + b"\x81\xa1k" * 1200 + b"\xc0"]
)
def test_a_deeply_nested_frame_is_malformed_not_a_crash(nested: bytes) -> None:
    # Seed 1, frame 102: ~1000 nested arrays (1 KB, under the 4 KB frame limit) raised RecursionError.
    assert len(nested) <= 4096
    for decode in (p.decode_client, p.decode_server):
        with pytest.raises(p.ProtocolError) as caught:
            decode(nested)
        assert caught.value.code == p.MALFORMED
    driver = FuzzDriver("nested")
    assert driver.feed(1, nested) == []
    assert driver.counts["error:malformed"] == 1


@contextmanager
def inbox(driver: FuzzDriver, conn: int) -> Iterator[list[p.ServerMessage]]:
    """What ``conn`` gets while the block runs."""
    got: list[p.ServerMessage] = []
    deliver = driver.runner.on_message

    def record(to: int | None, player_id: str | None, message: p.ServerMessage) -> None:
        deliver(to, player_id, message)
        if to == conn:
            got.append(message)

    driver.runner.on_message = record
    try:
        yield got
    finally:
        driver.runner.on_message = deliver


def replies(driver: FuzzDriver, conn: int, frame: dict[str, Any]) -> Iterator[p.ServerMessage]:
    """Feed one frame and yield what ``conn`` got for it."""
    with inbox(driver, conn) as got:
        assert driver.feed(conn, msgspec.msgpack.encode(frame)) == []
    yield from got


def test_a_room_closed_by_its_last_leaver_is_not_rebuilt_from_the_store() -> None:
    # Seed 1, frame 117: the last member left a racing room (closed), joined another; a join by
    # the first room's code rebuilt it from its stale stored record, with her in it again.
    driver = FuzzDriver("closed-room", faults=StoreFaults(), restart_chance=0.0)  # a store that never fails
    list(replies(driver, 1, {"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Ann"}))
    list(replies(driver, 2, {"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Bob"}))
    room = next(m for m in replies(driver, 1, {"type": "create_room"}) if isinstance(m, p.Room))
    list(replies(driver, 1, {"type": "start"}))
    driver.advance(2000)  # the countdown
    assert phase_of(driver.core, room.code) == p.RACING
    assert any(isinstance(m, p.Left) for m in replies(driver, 1, {"type": "leave"}))
    assert not driver.core.has_room(room.code)
    stored = run_store(driver.store, room.code)
    assert stored is not None and stored.members == []
    answer = list(replies(driver, 2, {"type": "join", "code": room.code}))
    assert [m.code for m in answer if isinstance(m, p.Error)] == [p.UNKNOWN_ROOM]
    assert not driver.core.has_room(room.code)


def run_store(store: MemoryStore, code: str) -> Any:
    loaded = run_now(store.load_room(code))
    return None if loaded is None else decode_room(loaded[0])


def test_a_room_ttl_shorter_than_a_race_loses_no_accepted_move() -> None:
    # Seed 11, frame 206 with a 90 s room TTL (the old core): the store dropped a racing room, the
    # racers kept entries the store no longer had, and a move retried against the missing room for
    # ever (a livelock). A live room's expiry waits for its results (the core's ExpireRoom), and a
    # missing room is `gone`, not a conflict.
    reproducer = run_campaign(207, seed=11, room_ttl_s=90, start_frame=206)
    assert [f.describe() for f in reproducer.failures] == []
    episode = run_campaign(5000, seed=11, room_ttl_s=90)
    assert [f.describe() for f in episode.failures] == []
    assert episode.stats.counts["note:race_results"] > 0 and episode.stats.counts["out:move_ok"] > 1000


def test_a_move_into_a_room_the_store_lost_closes_the_room() -> None:
    # The `gone` path: the store lost a racing room (evicted, deleted by hand). The next move's
    # append finds no such race; it is never acknowledged, nor retried, nor taken for a conflict:
    # the room is rebuilt from the store, which has nothing, so it closes and its members are told.
    driver = FuzzDriver("gone", faults=StoreFaults(), restart_chance=0.0)  # a store that never fails
    list(replies(driver, 1, {"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Ann"}))
    list(replies(driver, 2, {"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Bob"}))
    room = next(m for m in replies(driver, 1, {"type": "create_room"}) if isinstance(m, p.Room))
    list(replies(driver, 2, {"type": "join", "code": room.code}))
    list(replies(driver, 2, {"type": "ready", "ready": True}))
    list(replies(driver, 1, {"type": "start"}))
    driver.advance(2000)  # the countdown
    race = driver.core.rooms[room.code].race
    assert phase_of(driver.core, room.code) == p.RACING and race is not None
    ann = next(pid for pid in race.racers if driver.core.conns.get(1) == pid)
    first = race.racers[ann].game.legal_moves()[0]
    assert any(isinstance(m, p.MoveOk) for m in replies(driver, 1, {"type": "move", "id": 1, "move": first}))
    run_now(driver.store.delete_room(room.code))
    driver.runner.faults = StoreFaults(defer=1.0)  # the next append's answer is held back...
    second = race.racers[ann].game.legal_moves()[0]
    assert list(replies(driver, 1, {"type": "move", "id": 2, "move": second})) == []
    assert list(replies(driver, 1, {"type": "move", "id": 3, "move": "undo"})) == []  # queued behind it
    with inbox(driver, 1) as answer:
        while driver.runner.held:  # ...and arrives (no such race), then the room's reload (nothing)
            driver.runner.release(len(driver.runner.held))
            driver.dispatch_pending()
    # Every move gets one answer (docs/protocol.md): neither was played, and the room is gone.
    rejected = {m.id: m.code for m in answer if isinstance(m, p.MoveRejected)}
    assert rejected == {2: p.NOT_IN_ROOM, 3: p.NOT_IN_ROOM}, answer
    assert not any(isinstance(m, p.MoveOk) for m in answer), answer
    assert [m.reason for m in answer if isinstance(m, p.Kicked)] == ["gone"]
    assert not driver.core.has_room(room.code)
    assert driver.runner.counts["appends_gone"] == 1
    assert driver.stats().counts["note:room_gone"] == 1
    assert driver.finish() == []


def test_a_move_in_flight_when_its_room_closes_gets_its_answer() -> None:
    # Seed 1, frame 869777 (invariant 4): the only racer sent a move, then left before the store
    # answered; the room closed, the late MovePersisted found no room, and the move never got its
    # one answer. Moves not decided when a room closes are now answered (move_rejected not_in_room).
    reproducer = run_campaign(870000, seed=1, start_frame=869999)
    assert [f.describe() for f in reproducer.failures] == []
    driver = FuzzDriver("closing", faults=StoreFaults(), restart_chance=0.0)  # a store that never fails
    list(replies(driver, 1, {"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Ann"}))
    room = next(m for m in replies(driver, 1, {"type": "create_room"}) if isinstance(m, p.Room))
    list(replies(driver, 1, {"type": "start"}))
    driver.advance(2000)  # the countdown
    race = driver.core.rooms[room.code].race
    assert race is not None
    ann = next(iter(race.racers))
    driver.runner.faults = StoreFaults(defer=1.0)  # the append's answer is held back
    first = race.racers[ann].game.legal_moves()[0]
    assert list(replies(driver, 1, {"type": "move", "id": 1, "move": first})) == []
    assert list(replies(driver, 1, {"type": "move", "id": 2, "move": "undo"})) == []  # queued behind it
    answer = list(replies(driver, 1, {"type": "leave"}))
    assert {m.id: m.code for m in answer if isinstance(m, p.MoveRejected)} == {1: p.NOT_IN_ROOM, 2: p.NOT_IN_ROOM}
    assert any(isinstance(m, p.Left) for m in answer) and not driver.core.has_room(room.code)
    with inbox(driver, 1) as late:
        assert driver.finish() == []  # the held append lands: nothing more to say
    assert not any(isinstance(m, p.MoveOk | p.MoveRejected) for m in late), late
