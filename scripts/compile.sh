#!/usr/bin/env bash
# Build the compiled package into build/compiled: the same sources, with the simulator's and
# scheduler's hot modules compiled by mypyc (setup.py's COMPILED_FOLDERS), about twice as fast
# under `bench`. Use it by putting it first on the path:
#
#   scripts/compile.sh && PYTHONPATH=build/compiled .venv/bin/agentconsole bench ...
#
# Needs the test profile (`scripts/setup.sh --test`: mypy, which carries mypyc) and a C
# compiler. Idempotent: rebuilt only when a source file changed since the last build (a stale
# compiled tree would run old code), about a minute on two cores otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT=build/compiled
want="$(find app scheduler kvtiers server ui httpclient sample_traces -name '*.py' -print0 \
    | sort -z | xargs -0 cat setup.py pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ -f "$OUT/.sources" && "$(cat "$OUT/.sources")" == "$want" ]]; then
    exit 0
fi
rm -rf "$OUT" build/mypyc
echo "compile: building $OUT (mypyc)" >&2
AGENTCONSOLE_COMPILE=1 .venv/bin/python -m pip install --disable-pip-version-check -q \
    --no-deps --no-build-isolation --target "$OUT" .
echo "$want" > "$OUT/.sources"
