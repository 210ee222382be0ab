"""The spectator page: a small static site served by ``plot-server`` on its own port.

The page is plain HTML, CSS and one JavaScript module (no build step, no CDN). It speaks the
race protocol over the game port's WebSocket as a spectator, like ``plot watch``: this module
only serves files. See docs/web.md.
"""

from server.web.site import WebConfig, WebServer

__all__ = ["WebConfig", "WebServer"]
