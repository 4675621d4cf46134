#!/usr/bin/env bash
# Build the compiled package into build/compiled: the same sources, with the simulator's and
# scheduler's hot modules compiled by mypyc (setup.py's COMPILED_FOLDERS), about twice as fast
# under `bench`. Use it by putting it first on the path:
#
#   scripts/compile.sh && PYTHONPATH=build/compiled .venv/bin/agentconsole bench ...
#
# Needs the test profile (`scripts/setup.sh --test`: mypy, which carries mypyc), a C compiler
# and Python's headers. Idempotent: rebuilt only when a file of the package, the build files,
# Python or mypy changed since the last build (a stale compiled tree would run old code);
# about 90 s on two cores otherwise. PYTHON names the interpreter (default .venv/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-.venv/bin/python}"
OUT=build/compiled
FOLDERS=(app scheduler kvtiers server ui httpclient sample_traces)

fail() { echo "compile: $*" >&2; exit 2; }
command -v cc >/dev/null 2>&1 || fail "no C compiler (cc); scripts/setup.sh --test installs gcc"
"$PY" -c 'import mypyc' 2>/dev/null || fail "mypyc missing; run scripts/setup.sh --test"
"$PY" -c 'import os, sysconfig; assert os.path.exists(sysconfig.get_paths()["include"] + "/Python.h")' \
    2>/dev/null || fail "Python's headers (Python.h) missing: install python3-dev for $PY"

mkdir -p build
exec 9>build/.compile.lock
flock 9  # one build at a time; a reader of the old tree keeps it until the swap
want="$( { find "${FOLDERS[@]}" -type f -not -path '*/__pycache__/*' -print0 | sort -z \
    | xargs -0 sha256sum; sha256sum setup.py pyproject.toml; "$PY" -VV; "$PY" -m mypy --version; } \
    | sha256sum | cut -d' ' -f1)"
if [[ -f "$OUT/.sources" && "$(cat "$OUT/.sources")" == "$want" ]]; then
    exit 0
fi
echo "compile: building $OUT (mypyc)" >&2
# from a copy of the sources, so no earlier build's leftovers (build/lib.*) reach the tree
src="$(mktemp -d)"
trap 'rm -rf "$src" "$OUT.new"' EXIT
cp -r setup.py pyproject.toml README.md "${FOLDERS[@]}" "$src/"
find "$src" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$OUT.new"
AGENTCONSOLE_COMPILE=1 "$PY" -m pip install --disable-pip-version-check -q \
    --no-deps --no-build-isolation --target "$OUT.new" "$src"
echo "$want" > "$OUT.new/.sources"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"
