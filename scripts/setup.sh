#!/usr/bin/env bash
# The whole set-up of a fresh machine for the test suite, then the venv. Idempotent and
# non-interactive: installs only what is missing, with one `apt-get update` before the first
# install (as root, or through sudo), then makes .venv and installs the project into it.
#
#   scripts/setup.sh           set up for the tests (the README's test command and .ci/run run this)
#   scripts/setup.sh --race    set up to race only (the README's race command): no browser, no balancer
#   scripts/setup.sh --check   only say which system packages would be installed (exit 1 if any);
#                              with --race, those the race needs
#
# The system packages, and who needs them:
#   python3-venv  `python3 -m venv` itself (Debian ships Python without ensurepip)
#   chromium      the spectator page's browser tests (tests/test_web_browser.py, through Playwright)
#   haproxy       the balancer tests (tests/test_haproxy_affinity.py, tests/test_deploy.py)
#   pkg-config, libicu-dev, g++   building PyICU (the display-name checks, shared/names.py): an sdist
set -euo pipefail
cd "$(dirname "$0")/.."

# Is an executable NAME on the PATH or in the system folders (haproxy lives in /usr/sbin, off
# some users' PATH)? `command -v` alone is not enough: bash reports a file that is not executable.
have_program() {
    local dir
    local IFS=:
    for dir in $PATH /usr/local/sbin /usr/sbin /sbin; do
        [ -n "$dir" ] && [ -f "$dir/$1" ] && [ -x "$dir/$1" ] && return 0
    done
    return 1
}

# The Debian packages this machine lacks, one name a line.
missing_packages() {
    python3 -c 'import ensurepip' >/dev/null 2>&1 || echo python3-venv
    if [ "$for_race" = 0 ]; then
        have_program chromium || echo chromium
        have_program haproxy || echo haproxy
    fi
    have_program pkg-config || echo pkg-config
    if ! { have_program pkg-config && pkg-config --exists icu-uc; }; then
        echo libicu-dev
    fi
    have_program g++ || echo g++
}

for_race=0
check_only=0
for arg in "$@"; do
    case "$arg" in
        --race) for_race=1 ;;
        --check) check_only=1 ;;
        *)
            echo "usage: scripts/setup.sh [--race] [--check]" >&2
            exit 2
            ;;
    esac
done

missing="$(missing_packages | tr '\n' ' ')"
missing="${missing% }"

if [ "$check_only" = 1 ]; then
    if [ -n "$missing" ]; then
        echo "would install: $missing"
        exit 1
    fi
    echo "system packages: all present"
    exit 0
fi

if [ -n "$missing" ]; then
    if ! have_program apt-get; then
        echo "setup: install these system packages with your package manager, then run this again: $missing" >&2
        exit 1
    fi
    as_root=()
    if [ "$(id -u)" != 0 ]; then
        if ! have_program sudo; then
            echo "setup: missing $missing; as root run: apt-get update && apt-get install -y $missing" >&2
            exit 1
        fi
        as_root=(sudo)
    fi
    echo "setup: installing $missing"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    # shellcheck disable=SC2086  # the names, split
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing </dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
if [ "$for_race" = 1 ]; then
    .venv/bin/pip install -q -e '.[server]'
else
    .venv/bin/pip install -q -e '.[server,test]'
fi
# The engine's compiled build (docs/engine.md, "The compiled build"): mypyc comes with the test
# extra; without it or a C compiler this says so and the engine stays pure Python.
.venv/bin/python scripts/compile_engine.py || echo "setup: the compiled engine was not built; the pure-Python engine is used"
