#!/usr/bin/env bash
# CPU install profile for SGLang 0.5.23 (agentconsole CI and the embedded CPU default).
#
# Usage: scripts/install_sglang_cpu.sh [VENV_DIR | VENV_PYTHON]
#        (default: $VENV, else $VIRTUAL_ENV, else <repo>/.venv)
#
# Installs, into an existing venv:
#   1. CPU torch 2.13.0 (torch==2.13.0+cpu; never the CUDA build)
#   2. sglang==0.5.23 --no-deps (its metadata pins CUDA-only packages)
#   3. scripts/sglang_cpu/requirements.txt under scripts/sglang_cpu/constraints.txt
#   4. the torchvision operator-schema shim, loaded in every process by a .pth file
#   5. the import-only sgl_kernel placeholder (scripts/sglang_cpu/sgl_kernel_placeholder)
# then checks that `import sglang.srt.entrypoints.engine` works with SGLANG_USE_CPU_ENGINE=1.
#
# Idempotent: a stamp file in the venv holds a hash of this script, the requirement and
# constraints files, the shim and the placeholder; when it matches (and sglang is still
# there) the script exits at once.
# Set AGENTCONSOLE_SGLANG_FORCE=1 to reinstall anyway.
# If this machine's pip cannot find torch 2.13.0+cpu, point AGENTCONSOLE_TORCH_CPU_INDEX_URL at
# an index that has the PyTorch CPU wheels; the script refuses to fall back to a CUDA build.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SRC="$HERE/sglang_cpu"
TORCH_SPEC="torch==2.13.0+cpu"
SGLANG_SPEC="sglang==0.5.23"

target="${1:-${VENV:-${VIRTUAL_ENV:-$ROOT/.venv}}}"
if [[ -f "$target" && -x "$target" ]]; then
    PY="$target"
    VENV_DIR="$(cd "$(dirname "$target")/.." && pwd)"
elif [[ -x "$target/bin/python" ]]; then
    VENV_DIR="$(cd "$target" && pwd)"
    PY="$VENV_DIR/bin/python"
else
    echo "install_sglang_cpu: no venv at '$target' (pass a venv dir or its python)" >&2
    exit 2
fi

STAMP="$VENV_DIR/.agentconsole-sglang-cpu.stamp"
hash_inputs() {
    {
        echo "$TORCH_SPEC $SGLANG_SPEC"
        "$PY" -c 'import sys; print(sys.version)'
        cat "${BASH_SOURCE[0]}"
        (cd "$SRC" && find requirements.txt constraints.txt shim sgl_kernel_placeholder -type f \
            ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*.egg-info*' ! -path '*/build/*' \
            | LC_ALL=C sort | while read -r f; do echo "== $f"; cat "$f"; done)
    } | sha256sum | cut -d' ' -f1
}
WANT="$(hash_inputs)"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ "${AGENTCONSOLE_SGLANG_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" \
      && -d "$SITE/torch-2.13.0+cpu.dist-info" && -d "$SITE/sglang-0.5.23.dist-info" \
      && -f "$SITE/sgl_kernel/__init__.py" ]]; then
    echo "install_sglang_cpu: up to date ($VENV_DIR)"
    exit 0
fi
rm -f "$STAMP"

t0=$SECONDS
PIP=("$PY" -m pip install -q --disable-pip-version-check --progress-bar off)
say() { echo "install_sglang_cpu: [$((SECONDS - t0))s] $*"; }

# 1. CPU torch. Already there: keep it (pip would otherwise re-resolve).
have_torch="$("$PY" -c 'import importlib.metadata as m
try: print(m.version("torch"))
except m.PackageNotFoundError: print("")')"
if [[ "$have_torch" != "2.13.0+cpu" ]]; then
    say "installing $TORCH_SPEC (found '${have_torch:-none}')"
    if ! "${PIP[@]}" "$TORCH_SPEC"; then
        if [[ -n "${AGENTCONSOLE_TORCH_CPU_INDEX_URL:-}" ]]; then
            "${PIP[@]}" --extra-index-url "$AGENTCONSOLE_TORCH_CPU_INDEX_URL" "$TORCH_SPEC"
        else
            echo "install_sglang_cpu: $TORCH_SPEC not found; set AGENTCONSOLE_TORCH_CPU_INDEX_URL" >&2
            exit 1
        fi
    fi
fi

# 2. sglang itself, without its CUDA dependency list.
say "installing $SGLANG_SPEC --no-deps"
"${PIP[@]}" --no-deps "$SGLANG_SPEC"

# 3. The dependencies the CPU engine path imports, with the torch stack pinned.
say "installing scripts/sglang_cpu/requirements.txt"
say "(pip's 'sglang 0.5.23 requires ...' conflict lines are expected: its CUDA deps are left out)"
"${PIP[@]}" -c "$SRC/constraints.txt" -r "$SRC/requirements.txt"

# 4. torchvision schema shim, imported by every interpreter of the venv.
say "installing the torchvision shim into $SITE"
install -m 0644 "$SRC/shim/agentconsole_torchvision_shim.py" "$SITE/"
install -m 0644 "$SRC/shim/agentconsole_torchvision_shim.pth" "$SITE/"

# 5. Placeholder sgl_kernel (a real, tiny distribution: pip can list and uninstall it).
say "installing the sgl_kernel placeholder"
tmp_src="$(mktemp -d)"
trap 'rm -rf "$tmp_src"' EXIT
cp -r "$SRC/sgl_kernel_placeholder/." "$tmp_src/"
"${PIP[@]}" --no-deps --force-reinstall "$tmp_src"

# The torch stack must still be the CPU build (dist-info names are what the stamp check reads).
"$PY" - <<'EOF'
import importlib.metadata as m
got = {d: m.version(d) for d in ("torch", "torchvision", "triton", "sglang")}
assert got["torch"] == "2.13.0+cpu", f"torch was replaced: {got}"
assert got["sglang"] == "0.5.23", got
print("install_sglang_cpu: versions", got)
EOF

say "checking: SGLANG_USE_CPU_ENGINE=1 import sglang.srt.entrypoints.engine"
SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 "$PY" -W ignore -c \
    "import sglang.srt.entrypoints.engine as e; assert e.Engine" >/dev/null

echo "$WANT" >"$STAMP"
say "done ($VENV_DIR)"
