#!/usr/bin/env bash
# Regenerates the pinned, hashed locks the images install (`make images-lock`):
#   runtime/requirements-image-cpu.lock   runtime deps + cloud extra (rapidocr engine, s3fs/gcsfs:
#                                         batch storage and batch submit on s3:// and gs://)
#   runtime/requirements-image-cuda.lock  runtime deps + deepseek (torch) + cloud + otel extras
#   operator/requirements-image.lock      operator deps
# Each also pins the package's build backend ([build-system].requires), because the
# Dockerfiles install the package itself offline with --no-build-isolation.
# Universal resolution (markers instead of one platform) from Python 3.11 up: the same lock
# installs on Debian bookworm (3.11), python:3.11-slim and the CUDA Ubuntu 24.04 base (3.12).
# Hashes make pip refuse anything but the exact files resolved here.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${CACHE:-$HOME/.cache/docparser}
UV=${UV:-$CACHE/uv-bootstrap/bin/uv}
export UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv}
[ -x "$UV" ] || { echo "uv not found at $UV (run 'make install' once, or set UV=)" >&2; exit 1; }

build_requires() {  # the [build-system].requires of a pyproject, one per line
  python3 -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$1"
}

compile() {  # compile OUT PYPROJECT [uv args...]
  local out=$1 pyproject=$2
  shift 2
  build_requires "$pyproject" | "$UV" pip compile "$pyproject" - "$@" \
    --universal --python-version 3.11 --generate-hashes --quiet \
    --custom-compile-command "make images-lock" --output-file "$out"
  echo "wrote $out ($(grep -c '==' "$out") pins)"
}

compile runtime/requirements-image-cpu.lock runtime/pyproject.toml --extra cloud
compile runtime/requirements-image-cuda.lock runtime/pyproject.toml --extra deepseek --extra cloud --extra otel
compile operator/requirements-image.lock operator/pyproject.toml
