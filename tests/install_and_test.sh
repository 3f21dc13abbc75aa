#!/usr/bin/env bash
# Everything the test suite needs on a fresh Debian machine, then the suite (README, "The two commands"):
#   1. a virtual environment: the active one, else ./.venv (created);
#   2. this checkout with its test extra, by uv (else pip; MediaPipe's hand model ships inside the
#      package, so the video tests need no download);
#   3. headless chromium for the HTML viewer tests (apt-get; sudo when not root), unless one is there;
#   4. python -m pytest tests (extra arguments are passed on to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
    python3 -m venv .venv
    . .venv/bin/activate
fi
# uv (a PyPI package) installs the test extra's ~80 packages in about 15 s where pip took about 37 s
# (2-core machine, 2026-12-07); where uv cannot be installed or cannot install them (no PyPI, a private
# index that only pip is configured for), pip does it. --compile-bytecode, as pip does: where Python
# writes no .pyc files (PYTHONDONTWRITEBYTECODE), every test process would compile its imports again
python -m pip install -q uv 2>/dev/null \
    && python -m uv pip install -q --compile-bytecode --python "$(command -v python)" ".[test]" \
    || { python -m pip install -q --upgrade pip && python -m pip install -q ".[test]"; }
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
python -m pytest tests "$@"
