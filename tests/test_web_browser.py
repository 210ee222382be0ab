"""The spectator page in a real browser: the system's Chromium driven by Playwright, against a
real loopback server (memory or Redis store) with racers driven by the test over WebSockets.

Everything waits by condition: Playwright's ``expect`` polls until its assertion holds (or fails
at its timeout), and ``until`` polls our own checks the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
from playwright.async_api import Browser, Locator, Page, WebSocketRoute, expect
from redis_fixture import free_port
from support import Client, board, fast_config, make_room, running_server, start_race
from web_helpers import open_page, run_as_printed, until, web_server_for

from client.bot import choose_move
from server.limits import LimitsConfig
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import View, replay
from shared.fairplay import commitment

DEAL = 26  # the bot's moves put cards home early on this deal (8 within its first few moves)
XSS_NAME = "<img src=x onerror=f()>"
TIMEOUT_MS = 15_000

expect.set_options(timeout=TIMEOUT_MS)


async def play_until_home(client: Client, view: View, next_id: int, more_cards: int) -> tuple[View, int]:
    """The bot's moves until ``more_cards`` more cards are on the foundations."""
    target = view.foundation_cards + more_cards
    while view.foundation_cards < target:
        move = choose_move(view)
        assert move is not None and move != "resign", f"the bot ran out of moves at {view.foundation_cards} cards"
        await client.send(p.Move(id=next_id, move=move))
        reply = await client.expect(p.MoveOk)
        assert reply.id == next_id
        view, next_id = board(reply), next_id + 1
    return view, next_id


async def bar_of(page: Page, player_id: str) -> dict[str, Any]:
    row = page.locator(f'#leaderboard-body tr[data-player="{player_id}"]')
    result: dict[str, Any] = await row.evaluate(
        """row => {
            const cell = row.querySelector('.cardscell');
            return {
                cards: Number(cell.dataset.cards),
                fill: cell.querySelector('.bar-fill').getBoundingClientRect().width,
                bar: cell.querySelector('.bar').getBoundingClientRect().width,
            };
        }"""
    )
    return result


async def wait_for_bar(page: Page, player_id: str, cards: int) -> float:
    """Wait until the row shows ``cards`` and its bar has grown to that share; its width."""
    seen: dict[str, Any] = {}

    async def drawn() -> bool:
        seen.update(await bar_of(page, player_id))
        return bool(seen["cards"] == cards and abs(seen["fill"] / seen["bar"] - cards / 104) < 0.01)

    await until(drawn, f"the bar of {player_id} at {cards} cards (last seen {seen})")
    return float(seen["fill"])


async def boards_on_page(page: Page) -> dict[str, dict[str, str]]:
    """Player id -> pile name -> the pile's cards as the page holds them (data-cards / data-count)."""
    result: dict[str, dict[str, str]] = await page.locator("#boards").evaluate(
        """boards => Object.fromEntries([...boards.querySelectorAll('.board')].map(board => [
            board.dataset.player,
            Object.fromEntries([...board.querySelectorAll('[data-pile]')].map(pile => [
                pile.dataset.pile, pile.dataset.pile === 'stock' ? pile.dataset.count : pile.dataset.cards,
            ])),
        ]))"""
    )
    return result


def piles_of(view: View) -> dict[str, str]:
    """The same mapping from a board the server (or the Python engine) holds."""
    piles = {
        "stock": str(view.stock),
        "waste": ",".join(map(str, view.waste)),
        "reserve": "" if view.reserve_top is None else str(view.reserve_top),
    }
    piles.update({f"f{i}": ",".join(map(str, pile)) for i, pile in enumerate(view.foundations)})
    piles.update({f"t{i}": ",".join(map(str, pile)) for i, pile in enumerate(view.tableau)})
    return piles


async def test_a_leak_proof_race_watched_from_the_room_list_to_its_verified_result(
    browser: Browser, tmp_path: Path
) -> None:
    async with running_server() as server, web_server_for(server) as web:
        racers, code = await make_room(server, ["Ann", XSS_NAME], deal=DEAL)
        ann, other = racers
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/")
        page = watched.page

        # The front page lists the open room; its link opens the room's page.
        link = page.locator(f'#rooms-body a[href="/watch/{code}"]')
        await expect(link).to_have_text(code)
        await expect(page.locator(f'#rooms-body tr[data-code="{code}"] td.name')).to_have_text("Ann")
        await link.click()
        await expect(page).to_have_url(f"http://127.0.0.1:{web.port}/watch/{code}")
        # The list's socket names no room; the room's page names its room (docs/deployment.md, "Room affinity").

        async def two_sockets() -> bool:
            return len(watched.sockets) == 2

        await until(two_sockets, "the room page's socket")
        assert watched.sockets == [f"ws://127.0.0.1:{server.port}/", f"ws://127.0.0.1:{server.port}/?room={code}"]
        await expect(page.locator("#phase")).to_have_text("lobby")
        await expect(page.locator("#lobby li")).to_have_count(2)
        assert await page.locator("#lobby li strong").all_text_contents() == ["Ann", XSS_NAME]

        starts = await start_race(racers)
        await expect(page.locator("#phase")).to_have_text("racing")
        rows = page.locator("#leaderboard-body tr")
        await expect(rows).to_have_count(2)
        # Every name as text: the would-be tag is shown, never parsed.
        names = await page.locator("#leaderboard-body td.name").evaluate_all(
            "cells => cells.map(cell => cell.firstChild.textContent)"
        )
        assert sorted(names) == sorted(["Ann", XSS_NAME])
        assert await page.locator("main img").count() == 0
        # A real table with headers, for screen readers.
        await expect(page.locator("#leaderboard caption")).to_have_text("Leaderboard")
        await expect(page.locator('#leaderboard thead th[scope="col"]')).to_have_count(7)

        # The bar grows as Ann plays.
        assert starts[0].view is not None
        view, next_id = starts[0].view, 1
        widths = [await wait_for_bar(page, ann.pid, view.foundation_cards)]
        for _ in range(2):
            view, next_id = await play_until_home(ann, view, next_id, 1)
            widths.append(await wait_for_bar(page, ann.pid, view.foundation_cards))
        assert widths == sorted(widths) and widths[-1] > widths[0], widths

        # Leak-proof: no board anywhere on the page while the race runs.
        await expect(page.locator("#note")).to_contain_text("Leak-proof room")
        await expect(page.locator("#boards-section")).to_be_hidden()
        assert await page.locator(".board").count() == 0

        # A phone's width and a desktop's: the leaderboard fits without sideways scrolling.
        for width, height in ((375, 740), (1280, 800)):
            await page.set_viewport_size({"width": width, "height": height})
            await expect(rows.first).to_be_visible()
            overflow = await page.evaluate("document.documentElement.scrollWidth - innerWidth")
            assert overflow <= 0, (width, overflow)
            table = await page.locator(".tablewrap").evaluate("wrap => wrap.scrollWidth - wrap.clientWidth")
            assert table <= 0, (width, table)

        # The end: the boards, the revealed deal checked in the browser, and the plot verify lines.
        await ann.send(p.Move(id=next_id, move="resign"))
        await other.send(p.Move(id=1, move="resign"))
        results = await ann.expect(p.Results)
        await expect(page.locator("#phase")).to_have_text("results")
        verdict = page.locator("#verdict")
        await expect(verdict).to_have_attribute("data-ok", "true")
        await expect(verdict).to_contain_text("Verified in this browser")
        await expect(page.locator("#deal")).to_have_text(str(results.deal))
        await expect(page.locator("#commitment")).to_have_text(starts[0].commitment)
        await expect(page.locator("#boards .board")).to_have_count(2)
        shown = await boards_on_page(page)
        for player_id, record in results.records.items():
            game, outcome = replay(record.deal, record.moves, undo=record.undo)
            assert outcome.ok
            assert shown[player_id] == piles_of(game.view()), player_id

        # The record downloads, and the command printed beside it, run as printed where the
        # record was saved, verifies it against the commitment announced at the start.
        item = page.locator(f'ul.records li[data-player="{ann.pid}"]')
        line = await item.locator("pre.cmd").text_content() or ""
        command = shlex.split(line)
        assert command[:2] == ["plot", "verify"] and command[3:] == [
            f"--commitment={starts[0].commitment}", f"--salt={results.salt}",
        ]  # fmt: skip
        saved = await download_record(page, item, tmp_path)
        assert saved.name == command[2]
        status, output = await run_as_printed(line, tmp_path)
        assert status == 0 and "commitment matches" in output, output

        # A rematch: the page is back in the lobby, the last race's boards and reveal gone.
        await ann.send(p.Rematch())
        await expect(page.locator("#phase")).to_have_text("lobby")
        await expect(page.locator("#verify")).to_be_hidden()
        await expect(page.locator("#boards-section")).to_be_hidden()
        await expect(page.locator("#leaderboard")).to_be_hidden()
        assert watched.problems == []
        for client in racers:
            await client.close()


async def download_record(page: Page, item: Locator, folder: Path) -> Path:
    """Click the record's link in ``item``; the file, saved in ``folder`` under the page's name."""
    async with page.expect_download() as download_info:
        await item.locator("a").click()
    download = await download_info.value
    saved = folder / download.suggested_filename
    await download.save_as(saved)
    return saved


async def test_a_deal_changed_after_the_start_is_caught_by_the_page_and_its_printed_line(
    browser: Browser, tmp_path: Path
) -> None:
    """A server that swaps the deal after announcing its commitment, simulated by rewriting the
    results on their way to the page (the race server is real): the page says NOT verified, and
    the printed line checks the commitment announced at the start, not the one revealed with the
    new deal, so it fails too. The swapped salt is shell-hostile: the line quotes it."""
    salt = "a b'c;$(touch pwned)"
    swapped_deal = DEAL + 1
    swapped_commitment = commitment(swapped_deal, salt)

    def tamper(frame: str | bytes) -> str | bytes:
        if isinstance(frame, str):
            return frame
        message = p.decode_server(frame)
        if not isinstance(message, p.Results):
            return frame
        records = {pid: msgspec.structs.replace(r, deal=swapped_deal) for pid, r in message.records.items()}
        return p.encode(
            msgspec.structs.replace(
                message, deal=swapped_deal, salt=salt, commitment=swapped_commitment, records=records
            )
        )

    async def route(page: Page) -> None:
        def handler(socket: WebSocketRoute) -> None:
            server_side = socket.connect_to_server()
            server_side.on_message(lambda frame: socket.send(tamper(frame)))

        await page.route_web_socket(lambda url: True, handler)

    async with running_server() as server, web_server_for(server) as web:
        racers, code = await make_room(server, ["Ann", "Bob"], deal=DEAL)
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}", prepare=route)
        page = watched.page
        await expect(page.locator("#phase")).to_have_text("lobby")
        starts = await start_race(racers)
        await expect(page.locator("#phase")).to_have_text("racing")
        for client in racers:  # a resignation is legal on any deal: only the commitment can fail
            await client.send(p.Move(id=1, move="resign"))
        results = await racers[0].expect(p.Results)
        assert results.commitment == starts[0].commitment  # the real server is honest
        verdict = page.locator("#verdict")
        await expect(verdict).to_have_attribute("data-ok", "false")
        await expect(verdict).to_contain_text("NOT verified")
        await expect(page.locator("#commitment")).to_have_text(starts[0].commitment)

        item = page.locator(f'ul.records li[data-player="{racers[0].pid}"]')
        line = await item.locator("pre.cmd").text_content() or ""
        assert shlex.split(line)[3:] == [f"--commitment={starts[0].commitment}", f"--salt={salt}"]
        saved = await download_record(page, item, tmp_path)
        status, output = await run_as_printed(line, tmp_path)
        assert status == 1 and "commitment mismatch" in output, output
        assert not (tmp_path / "pwned").exists()
        # What the revealed commitment would have said: the swap is consistent with itself.
        status, output = await run_as_printed(
            f"plot verify {saved.name} --commitment={swapped_commitment} --salt={shlex.quote(salt)}", tmp_path
        )
        assert status == 0, output
        assert watched.problems == []
        for client in racers:
            await client.close()


async def test_live_boards_in_a_private_room_that_allows_them(browser: Browser) -> None:
    async with running_server() as server, web_server_for(server) as web:
        racers, code = await make_room(server, ["Ann", "Bob"], deal=DEAL, spectator_boards=0, private=True)
        ann, bob = racers
        # A private room is not listed: it is watched by its code, typed as people type it.
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/")
        page = watched.page
        await expect(page.locator("#rooms-empty")).to_be_visible()
        await page.fill("#code-input", "no")
        await page.click("form.bycode button")
        await expect(page.locator("#code-problem")).to_contain_text("5 characters")
        await page.fill("#code-input", f"{code[:2].lower()}-{code[2:].lower()}")
        await page.click("form.bycode button")
        await expect(page).to_have_url(f"http://127.0.0.1:{web.port}/watch/{code}")
        await expect(page.locator("#phase")).to_have_text("lobby")
        await expect(page.locator("#warnings")).to_contain_text("not leak-proof")
        starts = await start_race(racers)
        assert starts[0].view is not None
        view, _ = await play_until_home(ann, starts[0].view, 1, 2)
        await expect(page.locator("#boards .board")).to_have_count(2)
        await expect(page.locator("#boards-note")).to_contain_text("Live boards, 0 s behind")

        async def shows_anns_board() -> bool:
            return (await boards_on_page(page)).get(ann.pid) == piles_of(view)

        await until(shows_anns_board, "Ann's live board as the server last acknowledged it")
        assert watched.problems == []
        for client in (ann, bob):
            await client.send(p.Move(id=99, move="resign"))
            await client.close()


async def test_the_page_reconnects_by_itself_after_the_server_restarts(browser: Browser, redis_url: str) -> None:
    port = free_port()
    config = fast_config(port=port, shutdown_retry_ms=200)
    store = RedisStore(redis_url)
    try:
        async with web_server_for(lambda: port) as web:
            async with running_server(store, config) as server:
                racers, code = await make_room(server, ["Ann", "Bob"], deal=DEAL)
                starts = await start_race(racers)
                watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")
                page = watched.page
                await expect(page.locator("#conn")).to_have_attribute("data-state", "up")
                ann = racers[0]
                assert starts[0].view is not None
                view, next_id = await play_until_home(ann, starts[0].view, 1, 1)
                await wait_for_bar(page, ann.pid, view.foundation_cards)
                tokens = [c.welcome.token for c in racers if c.welcome]
                for client in racers:
                    await client.close()
            # The server is down: the page says so and keeps trying.
            await expect(page.locator("#conn")).to_have_attribute("data-state", "down")
            await expect(page.locator("#conn")).to_contain_text("reconnecting")
            async with running_server(store, config) as server:
                back = [await Client.open(server, name) for name in ("Ann", "Bob")]
                for client, token, name in zip(back, tokens, ("Ann", "Bob"), strict=True):
                    welcome = await client.hello(name, token=token)
                    assert welcome.resumed and welcome.room == code
                ann = back[0]
                snapshot = await ann.expect(p.RaceStart)
                assert snapshot.view == view
                await expect(page.locator("#conn")).to_have_attribute("data-state", "up")
                view, next_id = await play_until_home(ann, view, next_id, 1)
                await wait_for_bar(page, ann.pid, view.foundation_cards)
                await expect(page.locator("#phase")).to_have_text("racing")
                for client in back:
                    await client.send(p.Move(id=next_id, move="resign"))
                await expect(page.locator("#verdict")).to_have_attribute("data-ok", "true")
                await expect(page.locator("#boards .board")).to_have_count(2)
                assert watched.problems == []
                # Every connection of the room's page, the reconnections too, named the room.
                assert len(watched.sockets) >= 2
                assert set(watched.sockets) == {f"ws://127.0.0.1:{port}/?room={code}"}
                for client in back:
                    await client.close()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(store.close(), 5)


async def test_an_unknown_room_is_said_plainly(browser: Browser) -> None:
    async with running_server() as server, web_server_for(server) as web:
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/ABCDE")
        problem = watched.page.locator("#problem")
        await expect(problem).to_be_visible()
        await expect(problem).to_contain_text("There is no room ABCDE on this server")
        await expect(watched.page.locator("#conn")).to_have_attribute("data-state", "idle")  # nothing to follow
        assert watched.problems == []


async def test_the_page_latency_bench_runs() -> None:
    """bench/web_latency.py works (so it cannot rot silently); its figures are not checked here."""
    import importlib.util
    import sys

    bench = Path(__file__).resolve().parent.parent / "bench"
    if str(bench) not in sys.path:
        sys.path.append(str(bench))  # it imports machine_info from its own folder
    spec = importlib.util.spec_from_file_location("bench_web_latency", bench / "web_latency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = await module.run(moves=12, pace=20.0, spectators=1, spectator_hz=5.0)
    assert result["moves"] == 12 and result["spectators"] == 1
    assert result["timed_moves"] == 6  # deal 8's first 12 bot moves send 6 cards home
    assert set(result["latency_ms"]) == {"p50", "p90", "p99", "max", "min"}
    assert result["first_row_ms"]["median"] > 0


async def test_a_join_refused_for_a_spent_answer_budget_is_sent_again_after_its_wait(browser: Browser) -> None:
    """The page's address (127.0.0.1, shared here with a client that spent its budget joining and
    leaving) is refused its join rate_limited: the page says so, joins again after retry_ms, and
    shows the room."""
    # 1 KiB at once, then a few seconds per snapshot
    limits = replace(LimitsConfig.per_address_off(), address_answer_bytes_per_s=128)
    async with running_server(config=fast_config(limits=limits)) as server, web_server_for(server) as web:
        racers, code = await make_room(server, ["Ann", "Bob"])
        spender = await Client.open(server, "Eve")
        await spender.hello("Eve")
        while True:
            await spender.send(p.Join(code=code, role=p.SPECTATOR))
            answer = await spender.expect(p.Room | p.Error)  # type: ignore[arg-type]
            if isinstance(answer, p.Error):
                assert answer.code == p.RATE_LIMITED, answer
                break
            await spender.send(p.Leave())
            await spender.expect(p.Left)
        watched = await open_page(browser, f"http://127.0.0.1:{web.port}/watch/{code}")
        problem = watched.page.locator("#problem")
        await expect(problem).to_contain_text("joining again in")
        await expect(problem).to_be_hidden(timeout=30_000)  # joined: the room's snapshot came
        await expect(watched.page.locator("main")).to_contain_text("Bob")
        assert watched.problems == []
        for client in (*racers, spender):
            await client.close()
