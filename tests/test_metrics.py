"""GET /metrics (docs/metrics.md): a real server on loopback, real clients playing,
the Prometheus text scraped over HTTP, and the counters checked against what was played."""

from __future__ import annotations

import asyncio
import random
import urllib.error
import urllib.request
from dataclasses import replace

import pytest
from redis_fixture import free_port
from support import (
    FAST,
    Client,
    Samples,
    eventually,
    fast_config,
    latest,
    make_room,
    metric,
    metrics,
    play,
    running_server,
    server_process,
    start_race,
    view_game,
    wait_healthy,
)

from server.shell import RaceServer
from server.store.base import Store
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import View


async def scrape(server: RaceServer) -> Samples:
    assert server.metrics_port is not None
    return await asyncio.to_thread(metrics, server.metrics_port)


def board(start: p.RaceStart) -> View:
    assert start.view is not None
    return start.view


async def test_moves_answers_connections_and_rooms_are_counted() -> None:
    rng = random.Random(11)
    async with running_server() as server:
        before = await scrape(server)
        assert metric(before, "plot_moves_accepted_total") == 0
        assert metric(before, "plot_pubsub_messages_total", direction="published") == 0  # defined, none yet
        assert metric(before, "plot_rooms", phase=p.RACING) == 0
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        spectator = await Client.open(server, "Spec")
        await spectator.hello("Spec")
        await spectator.send(p.Join(code=code, role=p.SPECTATOR))
        await spectator.expect(p.Room)
        stranger = await Client.open(server, "Stranger")  # no hello: anonymous
        await ann.send(p.Move(id=1, move="stock>waste"))
        assert (await ann.expect(p.MoveRejected)).code == p.WRONG_PHASE  # before the race
        starts = await start_race([ann, bob])
        await ann.send(p.Move(id=1, move="reserve>t0"))
        assert (await ann.expect(p.MoveRejected)).code == p.ILLEGAL_MOVE
        view, next_id = await play(ann, board(starts[0]), 6, rng)
        await play(bob, board(starts[1]), 4, rng)
        accepted = next_id - 1 + 4
        await ann.send(p.Move(id=1, move="reserve>t0"))  # id 1 now names an applied move: bad_field
        assert (await ann.expect(p.MoveRejected)).code == p.BAD_FIELD
        samples = await scrape(server)
        assert metric(samples, "plot_moves_accepted_total") == accepted
        assert metric(samples, "plot_move_ack_seconds_count") == accepted
        assert 0 < metric(samples, "plot_move_ack_seconds_sum") < accepted * 5.0
        assert metric(samples, "plot_move_ack_seconds_bucket", le="+Inf") == accepted
        for code_ in (p.WRONG_PHASE, p.ILLEGAL_MOVE, p.BAD_FIELD):
            assert metric(samples, "plot_moves_rejected_total", code=code_) == 1, code_
        assert metric(samples, "plot_connections", kind=p.RACER) == 2
        assert metric(samples, "plot_connections", kind=p.SPECTATOR) == 1
        assert metric(samples, "plot_connections", kind="anonymous") == 1
        assert metric(samples, "plot_rooms", phase=p.RACING) == 1
        assert metric(samples, "plot_connections_opened_total") == 4
        assert metric(samples, "plot_queue_depth", queue="move_writes") == 0
        assert metric(samples, "plot_frames_received_total") >= accepted + 3
        # The memory store makes no calls to a store server: nothing to count.
        assert not [key for key in samples if key[0] == "plot_store_calls_total"]
        # A resent move is answered, not applied again: a duplicate, not another acceptance.
        move = p.Move(id=next_id, move=view_game(view).legal_moves()[0])
        await ann.send(move)
        assert not (await ann.expect(p.MoveOk)).duplicate
        await ann.send(move)
        assert (await ann.expect(p.MoveOk)).duplicate
        accepted += 1
        await stranger.close()
        await eventually(lambda: server.metrics_snapshot().connections["anonymous"] == 0)
        samples = await scrape(server)
        assert metric(samples, "plot_moves_duplicate_total") == 1
        assert metric(samples, "plot_moves_accepted_total") == accepted
        assert metric(samples, "plot_connections", kind="anonymous") == 0
        for client in (ann, bob, spectator):
            await client.close()


async def test_two_servers_in_one_process_keep_their_own_counts() -> None:
    rng = random.Random(3)
    async with running_server() as first, running_server() as second:
        (ann, bob), _code = await make_room(first, ["Ann", "Bob"])
        starts = await start_race([ann, bob])
        _view, next_id = await play(ann, board(starts[0]), 3, rng)
        one, two = await scrape(first), await scrape(second)
        assert metric(one, "plot_moves_accepted_total") == next_id - 1 > 0
        assert metric(two, "plot_moves_accepted_total") == 0
        assert metric(two, "plot_connections", kind=p.RACER) == 0
        await ann.close()
        await bob.close()


def test_workers_merge_into_one_scrape_labelled_by_worker() -> None:
    """plot-server --workers 3 answers a scrape for the host: each worker's series with a
    ``worker`` label, their types and help kept, and ``plot_worker_up`` 0 for one that did not
    answer (restarting). The end-to-end form: test_server_nodes.py, the workers test."""
    from prometheus_client.parser import text_string_to_metric_families

    from server.metrics import Metrics, Snapshot, merge_workers

    first, second = Metrics(lambda: Snapshot(rooms={"racing": 2})), Metrics(lambda: Snapshot(rooms={"lobby": 1}))
    for _ in range(3):
        first.accepted(0.002, duplicate=False)
    second.accepted(0.02, duplicate=False)
    second.rejected("busy")
    text = merge_workers({0: first.render(), 1: second.render(), 2: None}, 3).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families.values()
        for sample in family.samples
    }
    assert metric(samples, "plot_moves_accepted_total", worker="0") == 3
    assert metric(samples, "plot_moves_accepted_total", worker="1") == 1
    assert metric(samples, "plot_moves_rejected_total", worker="1", code="busy") == 1
    assert metric(samples, "plot_rooms", worker="0", phase="racing") == 2
    assert metric(samples, "plot_rooms", worker="1", phase="lobby") == 1
    assert metric(samples, "plot_move_ack_seconds_bucket", worker="1", le="0.025") == 1
    assert metric(samples, "plot_move_ack_seconds_bucket", worker="1", le="0.01") == 0
    assert [metric(samples, "plot_worker_up", worker=w) for w in "012"] == [1, 1, 0]
    assert families["plot_moves_accepted"].type == "counter" and families["plot_move_ack_seconds"].type == "histogram"
    assert all("worker" in dict(labels) for _name, labels in samples), "an unlabelled series"


async def test_store_calls_on_redis_are_counted_by_operation(redis_url: str) -> None:
    rng = random.Random(5)
    store = RedisStore(redis_url)
    try:
        async with running_server(store) as server:
            (ann, bob), _code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            _view, next_id = await play(ann, board(starts[0]), 5, rng)
            samples = await scrape(server)
            # Every acknowledged move was in a batch stored before its ack: at least one call, at most
            # one a move (ann waits for each ack) and one more per reload of the script.
            appends = metric(samples, "plot_store_calls_total", op="append_moves")
            assert 1 <= appends <= next_id - 1 + 2
            assert metric(samples, "plot_store_call_seconds_count", op="append_moves") == appends
            assert metric(samples, "plot_store_calls_total", op="create_room") == 1
            assert metric(samples, "plot_store_calls_total", op="put_player") >= 2
            assert not [key for key in samples if key[0] == "plot_store_errors_total" and samples[key]]
            await ann.close()
            await bob.close()
    finally:
        await store.close()


async def test_store_errors_are_counted() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5, connect_timeout=0.5, retries=0)
    try:
        async with running_server(store) as server:
            status = await asyncio.to_thread(http_status, server.port, "/healthz")
            assert status == 503  # nothing listens there
            samples = await scrape(server)
            assert metric(samples, "plot_store_errors_total", op="ping") >= 1
            assert metric(samples, "plot_store_calls_total", op="ping") >= 1
    finally:
        await store.close()


async def test_metrics_off_answers_404_and_counts_nothing() -> None:
    store: Store = MemoryStore()
    async with running_server(store, fast_config(metrics=False)) as server:
        assert server.metrics is None and store.observer is None
        assert await asyncio.to_thread(http_status, server.port, "/metrics") == 404
        assert await asyncio.to_thread(http_status, server.metrics_port, "/metrics") == 404
        (ann, bob), _code = await make_room(server, ["Ann", "Bob"])
        starts = await start_race([ann, bob])
        await play(ann, board(starts[0]), 2, random.Random(1))  # the hot path without metrics
        await ann.close()
        await bob.close()


def http_status(port: int | None, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_plot_server_serves_metrics_unless_told_not_to() -> None:
    port, listener = free_port(), free_port()
    with server_process("--port", str(port), "--metrics-port", str(listener)) as proc:
        await asyncio.to_thread(wait_healthy, proc, port)
        samples = await asyncio.to_thread(metrics, listener)
        assert metric(samples, "plot_connections", kind=p.RACER) == 0
        assert ("plot_rooms", (("phase", p.LOBBY),)) in samples
    port, listener = free_port(), free_port()
    with server_process("--port", str(port), "--metrics-port", str(listener), env={"PLOT_METRICS": "off"}) as proc:
        await asyncio.to_thread(wait_healthy, proc, port)
        assert await asyncio.to_thread(http_status, listener, "/metrics") == 404


@pytest.mark.parametrize(("args", "env"), [(["--metrics", "maybe"], {}), ([], {"PLOT_METRICS": "yes"})])
def test_a_bad_metrics_setting_is_refused_in_one_line(args: list[str], env: dict[str, str]) -> None:
    with server_process("--port", str(free_port()), *args, env=env) as proc:
        assert proc.wait(10) == 2
        assert proc.stderr is not None
        lines = proc.stderr.read().strip().splitlines()
        assert len(lines) == 1 and "--metrics" in lines[0] and "on or off" in lines[0], lines


async def test_pubsub_between_two_nodes_is_counted(redis_url: str) -> None:
    """Two nodes sharing rooms on one Redis (docs/scaling.md, "Several nodes"): the moves played on
    A are published and received on B; each node's heartbeat times its trip through pub/sub."""
    shared = fast_config(core=replace(FAST, shared_rooms=True))
    a_store, b_store = RedisStore(redis_url), RedisStore(redis_url)
    try:
        async with running_server(a_store, shared) as a, running_server(b_store, shared) as b:
            host = await Client.open(a, "host")
            await host.hello("host")
            await host.send(p.CreateRoom(options=p.RoomOptions()))
            code = (await host.expect(p.Room)).code
            bob = await Client.open(b, "bob")
            await bob.hello("bob")
            await bob.send(p.Join(code=code))  # node B loads the room node A created
            await bob.expect(p.Room)
            await bob.send(p.Ready(ready=True))
            await eventually(
                lambda: any(m.ready for m in latest(host, p.Room).members if m.player_id == bob.pid),
                what="bob (on B) ready, seen on A",
            )
            starts = await start_race([host, bob])
            _view, next_id = await play(host, board(starts[0]), 4, random.Random(2))

            async def counted() -> bool:
                one, two = await scrape(a), await scrape(b)
                return (
                    metric(one, "plot_pubsub_messages_total", direction="published") >= next_id - 1
                    and metric(two, "plot_pubsub_messages_total", direction="received") >= next_id - 1
                    and metric(one, "plot_pubsub_lag_seconds_count") >= 1
                    and metric(two, "plot_pubsub_lag_seconds_count") >= 1
                )

            await eventually(counted, timeout=10, what="A's moves published, received on B, heartbeats timed")
            one = await scrape(a)
            assert metric(one, "plot_pubsub_gaps_total") == 0
            assert metric(one, "plot_store_calls_total", op="publish") >= 1
            await host.close()
            await bob.close()
    finally:
        await a_store.close()
        await b_store.close()


async def test_every_metric_served_is_documented_and_every_documented_one_served() -> None:
    """docs/metrics.md names exactly the families a scrape has."""
    import re
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    page = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    documented = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in re.findall(r"`(plot_[a-z_]+)", page)}
    async with running_server() as server:
        body = await asyncio.to_thread(metrics_text, server.metrics_port)
    served = {family.name for family in text_string_to_metric_families(body) if not family.name.endswith("_created")}
    served.add("plot_worker_up")  # served only under --workers (test_workers_merge_into_one_scrape_labelled_by_worker)
    assert served == documented, (served - documented, documented - served)


async def test_the_alert_rules_name_only_metrics_that_are_served() -> None:
    """deploy/alerts.yml (Prometheus rules): well formed, and every plot_ metric it names exists."""
    import re
    from pathlib import Path

    import yaml
    from prometheus_client.parser import text_string_to_metric_families

    rules = yaml.safe_load((Path(__file__).resolve().parent.parent / "deploy" / "alerts.yml").read_text())
    (group,) = rules["groups"]
    alerts = group["rules"]
    assert len({rule["alert"] for rule in alerts}) == len(alerts) >= 8
    named: set[str] = set()
    for rule in alerts:
        assert rule["labels"]["severity"] in ("page", "ticket") and rule["annotations"]["summary"]
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
        named |= {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in re.findall(r"plot_[a-z_]+", rule["expr"])}
    async with running_server() as server:
        body = await asyncio.to_thread(metrics_text, server.metrics_port)
    served = {family.name for family in text_string_to_metric_families(body)} | {"plot_worker_up"}  # --workers only
    assert named and named <= served, named - served
    assert {"plot_store_errors", "plot_move_ack_seconds", "plot_pubsub_lag_seconds"} <= named


def metrics_text(port: int | None) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())
