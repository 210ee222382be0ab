"""``plot host`` shows the room's spectator-page link next to its code, and that link, opened in
Chromium, is the room's page (a real server, the real terminal client, the real browser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect
from support import running_server, screen_text, until
from web_helpers import open_page, web_server_for

from client.cli import main as plot_main
from client.commands.host import watch_url
from client.tui.race import RaceApp, RaceConfig


def test_the_watch_url_follows_the_server_address() -> None:
    assert watch_url("ws://localhost:8765") == "http://localhost:8766"
    assert watch_url("wss://race.example.org") == "https://race.example.org:8766"
    assert watch_url("ws://[::1]:9000/") == "http://[::1]:9001"
    assert watch_url("ws://localhost:8765", "https://example.org/plot/") == "https://example.org/plot"


async def test_plot_host_shows_the_link_and_the_link_opens_the_room(
    browser: Browser,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    async with running_server() as server, web_server_for(server) as web:
        base = f"http://127.0.0.1:{web.port}"
        configs: list[RaceConfig] = []

        def capture(config: RaceConfig) -> int:  # the app is run below, under Textual's test pilot
            configs.append(config)
            return 0

        monkeypatch.setattr("client.commands._race_args.run_race_app", capture)
        server_url = f"ws://127.0.0.1:{server.port}"
        assert plot_main(["host", "--server", server_url, "--name", "Ann", "--watch-url", base]) == 0
        monkeypatch.setenv("PLOT_WATCH_URL", base + "/")
        assert plot_main(["host", "--server", server_url, "--name", "Ann"]) == 0
        assert [c.watch_url for c in configs] == [base, base]

        app = RaceApp(configs[0])
        async with app.run_test(size=(110, 40)):
            await until(lambda: app.model.room is not None, "the room")
            assert app.model.room is not None
            code = app.model.room.code
            link = f"{base}/watch/{code}"
            await until(lambda: link in screen_text(app), f"the link {link} on the lobby screen")
            watched = await open_page(browser, link)
            await expect(watched.page.locator("#phase")).to_have_text("lobby")
            await expect(watched.page.locator("#lobby li strong")).to_have_text(["Ann"])
            assert watched.problems == []
