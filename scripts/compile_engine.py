"""Compile the engine (shared/cards.py, deal.py, engine.py) with mypyc into build/compiled/.

    .venv/bin/python scripts/compile_engine.py            # build, unless the build matches the sources
    .venv/bin/python scripts/compile_engine.py --force    # build again
    .venv/bin/python scripts/compile_engine.py --check    # exit 0 if a build matching the sources is in use

scripts/setup.sh runs it. Optional: without mypyc (the test extra) or a C compiler it says so and
exits 0, and the engine stays pure Python. `shared` imports the compiled modules only while their
recorded sources match today's (shared/_build.py), so an edit to the engine falls back to the pure
modules until the next build; PLOT_PURE_PYTHON=1 forces them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from shared._build import BESIDE, COMPILED, FOLDER, compiled_folder, source_digests  # noqa: E402


def compiler() -> str | None:
    configured = (sysconfig.get_config_var("CC") or "").split()
    return next((found for name in [*configured[:1], "cc", "gcc"] if (found := shutil.which(name))), None)


def build() -> int:
    if importlib.util.find_spec("mypyc") is None:
        print("compile_engine: mypyc is not installed (the test extra has it): the engine stays pure Python")
        return 0
    if compiler() is None:
        print("compile_engine: no C compiler: the engine stays pure Python")
        return 0
    FOLDER.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compiled-", dir=FOLDER.parent) as work:
        src = Path(work) / "shared"
        src.mkdir()
        (src / "__init__.py").write_text("")
        (src / "py.typed").write_text("")
        digests = source_digests()
        for name in COMPILED + BESIDE:
            shutil.copyfile(ROOT / "shared" / f"{name}.py", src / f"{name}.py")
        result = subprocess.run(
            [sys.executable, "-m", "mypyc", *(f"shared/{name}.py" for name in COMPILED)],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(result.stdout[-4000:] + result.stderr[-4000:], file=sys.stderr)
            print("compile_engine: mypyc failed (above): the engine stays pure Python", file=sys.stderr)
            return 1
        shutil.rmtree(Path(work) / "build")
        for copied in src.glob("*.py"):  # the compiled modules stand in for theirs; the rest import from shared/
            copied.unlink()
        manifest = {"cache_tag": sys.implementation.cache_tag, "sources": digests}
        (Path(work) / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if FOLDER.exists():
            shutil.rmtree(FOLDER)
        Path(work).rename(FOLDER)
        Path(work).mkdir()
    print(f"compile_engine: built {', '.join(COMPILED)} into {FOLDER.relative_to(ROOT)}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even if the build matches the sources")
    parser.add_argument("--check", action="store_true", help="exit 0 if a build matching the sources is used")
    opts = parser.parse_args()
    if opts.check:
        sys.exit(0 if compiled_folder() is not None else 1)
    if not opts.force and compiled_folder() is not None:
        print("compile_engine: the compiled build matches the sources")
        return
    sys.exit(build())


if __name__ == "__main__":
    main()
