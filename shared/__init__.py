"""The project's own shared package: cards, deals, the engine and the protocol. Pure: no I/O.

The one exception is this import's plumbing: where a compiled build of the engine matches these
sources, its modules are found first (shared/_build.py; docs/engine.md, "The compiled build").
"""

import sys as _sys

from shared._build import compiled_folder as _compiled_folder

_folder = _compiled_folder()
if _folder is not None:
    __path__.insert(0, str(_folder / "shared"))  # shared.engine, .cards, .deal: the compiled modules
    _sys.path.append(str(_folder))  # the build's runtime library, a top-level module
