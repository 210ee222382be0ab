"""What every part of the shell is built with: the configuration, the store, the core (handle()
through ``dispatch``, and its read-only queries), the link to other nodes, and the shell's tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from server.core import ServerCore
from server.core.events import Event
from server.shell.config import ServerConfig, Tasks
from server.shell.link import Link
from server.store.base import Store


@dataclass(frozen=True, slots=True)
class ShellContext:
    config: ServerConfig
    store: Store
    core: ServerCore
    link: Link
    tasks: Tasks
    dispatch: Callable[[Event], None]  # an event to the core, its effects carried out


class Part:
    """A part of the shell: the context's pieces as its own attributes (read on every move)."""

    def __init__(self, ctx: ShellContext) -> None:
        self.config = ctx.config
        self.store = ctx.store
        self.core = ctx.core
        self.link = ctx.link
        self.tasks = ctx.tasks
        self.dispatch = ctx.dispatch
