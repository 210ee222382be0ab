"""``plot identity``: the secrets that hold your claimed names (docs/players.md), one per server,
in the state directory. ``export [FILE]`` writes them to FILE (or to a pipe: never to the
screen), ``import FILE`` takes them in on another machine, ``list`` shows which names you hold
where (never a secret), ``forget`` drops a server's."""

from __future__ import annotations

import argparse
import sys

from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    export = actions.add_parser("export", help="write your identities to FILE (or a pipe), to move them")
    export.add_argument("file", nargs="?", help="where to write them (owner-only); none: standard output, if a pipe")
    take = actions.add_parser("import", help="take identities in from a file another machine exported")
    take.add_argument("file", help="the exported file")
    actions.add_parser("list", help="the names you hold, by server (no secrets)")
    forget = actions.add_parser("forget", help="drop the identity kept for a server (its name stays claimed)")
    add_server_arguments(forget, name=False)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from client.identities import (
        IdentityFileError,
        dump,
        export_to,
        forget,
        identities_path,
        import_from,
        load_all,
        server_key,
    )
    from client.widgets.plain import clean

    try:
        if args.action == "export":
            if args.file is None:
                if sys.stdout.isatty():
                    print("plot identity export: give a FILE (or pipe it): secrets are never shown on screen")
                    return 2
                sys.stdout.write(dump(load_all()))
                return 0
            count = export_to(Path(args.file))
            print(f"{count} identit{'y' if count == 1 else 'ies'} written to {args.file} (readable by you only)")
            return 0
        if args.action == "import":
            count, replaced = import_from(Path(args.file))
            print(f"{count} identit{'y' if count == 1 else 'ies'} taken in ({identities_path()})")
            for server in replaced:
                print(f"  replaced the one for {server}")
            return 0
        if args.action == "forget":
            url = server_url(args)
            if forget(url):
                print(f"forgot the identity for {server_key(url)} (the name stays claimed there)")
                return 0
            print(f"no identity kept for {server_key(url)}")
            return 1
        identities = load_all()
        if not identities:
            print("no identities: claim a name with  plot claim NAME --server URL")
        for server, held in sorted(identities.items()):
            shown = clean(held.name) if held.name else "(a claim not answered yet)"
            print(f"{server}  {shown}")
        return 0
    except (IdentityFileError, OSError) as exc:
        print(f"plot identity: {exc}")
        return 1
