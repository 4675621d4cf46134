#!/usr/bin/env bash
# Set up the project's virtual environment (.venv) from the project's own files.
#
#   scripts/setup.sh          runtime profile: the package, its dependencies and the SGLang
#                             runtime (CPU profile on a machine without an NVIDIA GPU, the
#                             pinned `.[sglang]` extra on a GPU machine)
#   scripts/setup.sh --test   also the test tools and Debian's Chromium for the browser lane
#
# Both profiles install Debian's bubblewrap (`bwrap`), the sandbox of the gateway's `sandbox`
# executor (without it, registering a sandbox tool is refused).
#
# Idempotent and fast when nothing changed: dependency installs are skipped while a stamp
# holding a hash of pyproject.toml matches; the package itself is always re-linked (1 s),
# because the strict editable install only sees new modules after a reinstall.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WITH_TESTS=0
[[ "${1:-}" == "--test" ]] && WITH_TESTS=1

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$PYTHON" -c 'import sys; assert sys.version_info[:2] >= (3, 11), sys.version' \
    || { echo "setup: Python 3.11+ is required" >&2; exit 2; }
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check --progress-bar off -q)

extras="."
[[ $WITH_TESTS == 1 ]] && extras=".[dev]"
stamp=".venv/.agentconsole-deps.stamp"
want="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1) $extras"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "setup: installing dependencies ($extras)"
    "${PIP[@]}" --upgrade pip setuptools wheel
    "${PIP[@]}" -e "$extras" --config-settings editable_mode=strict
    echo "$want" > "$stamp"
fi
# the package itself, re-linked so new modules are importable (and visible to mypy)
"${PIP[@]}" --no-deps --no-build-isolation -e . --config-settings editable_mode=strict

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    gpu_stamp=".venv/.agentconsole-sglang-gpu.stamp"
    if [[ ! -f "$gpu_stamp" ]]; then
        "${PIP[@]}" -e ".[sglang]" --config-settings editable_mode=strict
        touch "$gpu_stamp"
    fi
else
    scripts/install_sglang_cpu.sh .venv
fi

# Debian packages: bubblewrap (and the Debian python3 and util-linux prlimit it runs) for the
# gateway's sandboxed code executor, in both profiles (serve needs it); chromium and a C
# compiler for the tests.
debs=()
[[ -x /usr/bin/bwrap ]] || debs+=(bubblewrap)
[[ -x /usr/bin/python3 ]] || debs+=(python3)
[[ -x /usr/bin/prlimit ]] || debs+=(util-linux)
[[ $WITH_TESTS == 1 && ! -x /usr/bin/chromium ]] && debs+=(chromium)
# a C compiler for the compiled build's test (scripts/compile.sh, tests/compiled)
[[ $WITH_TESTS == 1 ]] && ! command -v cc >/dev/null 2>&1 && debs+=(gcc)
if (( ${#debs[@]} )); then
    echo "setup: installing Debian's ${debs[*]}"
    SUDO=""
    [[ $(id -u) != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${debs[@]}" >/dev/null
fi
echo "setup: ready (.venv)"
