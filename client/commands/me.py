"""``plot me``: your own daily days on a server, under the name you claimed there."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser, name=False)


def run(args: argparse.Namespace) -> int:
    from client.commands.player import show_player
    from client.identities import identity_for
    from client.words import plot_command

    url = server_url(args)
    identity = identity_for(url)
    if identity is None or identity.name is None or not identity.claimed:
        print(f"plot me: you have no claimed name on {url}: {plot_command()} claim NAME claims one")
        return 1
    return show_player(url, identity.name, "me", me=identity.profile_id)
