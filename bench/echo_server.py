"""The baseline for the load benchmark: a bare ``websockets`` echo server.

Same library, same event loop choice (uvloop where installed), compression off, the same
frame-size limit as plot-server. Each binary frame is answered with one frame of
``--reply-size`` bytes (default: the size of a typical ``move_ok``), so the baseline moves
the same bytes per message as the race server does.

    python bench/echo_server.py --port 8799 [--reply-size 290]
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from websockets.asyncio.server import ServerConnection, serve


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--reply-size", type=int, default=290, help="bytes per reply frame")
    args = parser.parse_args()
    reply_padding = b"\x00" * args.reply_size

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            # The request's bytes first (its id), padded to the size of a real reply.
            data = frame if isinstance(frame, bytes) else frame.encode()
            await ws.send(data + reply_padding[len(data) :])

    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    async with serve(echo, args.host, args.port, compression=None, max_size=4096, ping_interval=20):
        print(f"echo listening on ws://{args.host}:{args.port}", flush=True)
        await stop


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
