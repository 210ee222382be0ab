"""``plot claim NAME``: claim a name on a server and keep it (docs/players.md). The secret that
holds it stays in the state directory (``identities.json``, owner-only), never on screen; every
later connection to that server says hello with it and shows the claimed name. ``--rename NEW``
changes the claimed name (once in 30 days). ``plot identity`` moves the secret between machines."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the name to claim (the same rule as any display name)")
    parser.add_argument(
        "--rename",
        action="store_true",
        help="change the name you claimed on this server to NAME (at most once in 30 days; "
        "the old one stays yours alone for 30 days)",
    )
    add_server_arguments(parser, name=False)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.connection import Connection, ConnectionFailed
    from client.identities import Identity, IdentityFileError, identity_for, new_secret, remember, server_key
    from client.widgets.plain import clean
    from client.words import plot_command
    from shared.protocol import Claim, Claimed, Error, Rename

    url = server_url(args)
    key = server_key(url)
    try:
        held = identity_for(url)
    except IdentityFileError as exc:
        print(f"plot claim: {exc}")
        return 1
    if args.rename and (held is None or not held.claimed):
        print(f"plot claim: you have claimed no name on {key}: claim one with  {plot_command()} claim NAME")
        return 1
    if not args.rename and held is not None and held.claimed:
        print(
            f"plot claim: you have claimed {clean(held.name or '?')!r} on {key} already; "
            f"to change it:  {plot_command()} claim --rename {args.name}"
        )
        return 1
    if not args.rename:
        # Written before the claim goes out: an answer lost on the way is retried with this secret.
        secret = held.secret if held is not None else new_secret()
        remember(Identity(key, secret, None, None))

    async def ask() -> Claimed | Error | str:
        if args.rename:
            connection = Connection(url, "claimer")  # bound to the claimed profile by its secret
            request: Claim | Rename = Rename(name=args.name)
        else:
            connection = Connection(url, "claimer", identity=None)
            request = Claim(name=args.name, identity=secret)
        try:
            await connection.start()
            return await connection.request(request, Claimed)
        except ConnectionFailed as exc:
            return str(exc)
        finally:
            await connection.close()

    reply = asyncio.run(ask())
    if isinstance(reply, str):
        print(f"plot claim: {reply}")
        return 1
    if isinstance(reply, Error):
        print(f"plot claim: {clean(reply.message)} ({reply.code})")
        return 1
    saved = identity_for(url)
    assert saved is not None
    path = remember(Identity(key, saved.secret, reply.profile_id, reply.name))
    verb = "is now your name" if args.rename else "is yours"
    print(f"{clean(reply.name)} {verb} on {key}: rooms there mark it ✓.")
    print(f"The secret that holds it is in {path} (never shown); {plot_command()} identity export FILE moves it.")
    return 0
