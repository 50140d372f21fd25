#!/usr/bin/env bash
# Builds gitopscheck (kstatus + gopher-lua, see README.md) from its pinned Go modules into
# ~/.cache/docparser/gitopscheck/<stamp>/, outside the clone, as tests/controlplane/build.sh does
# for the control plane. The stamp is a checksum of the sources, so an edit rebuilds and an
# unchanged tree returns at once. Exit 0 when the binary is ready, 1 when it cannot be built (no
# Go, no module proxy): the Makefile tolerates 1 and the tests that need it skip and say why.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stamp=$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go "$here/build.sh" | cksum | cut -d' ' -f1)
cache_root="${DOCPARSER_GITOPSCHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docparser/gitopscheck}"
dest="$cache_root/$stamp"
if [ "${1:-}" = "--path" ]; then # where the binary of this tree is, if it is built (for the tests)
	[ -x "$dest/gitopscheck" ] && echo "$dest/gitopscheck"
	exit $?
fi
if [ -x "$dest/gitopscheck" ]; then
	echo "gitopscheck: cached in $dest"
	exit 0
fi
GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
	echo "gitopscheck: Go not found; the Flux/Argo CD agreement tests will be skipped" >&2
	exit 1
fi
start=$(date +%s)
mkdir -p "$cache_root"
tmp="$cache_root/.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
# -mod=readonly: go.sum is committed, so a build never rewrites it (and works offline once the
# modules are in the module cache). Small: one core and a few seconds warm, well under a minute cold.
CGO_ENABLED=0 GOMAXPROCS=${GOMAXPROCS:-2} GOFLAGS=-mod=readonly nice -n 10 \
	"$GO" build -p "${BUILD_JOBS:-1}" -trimpath -ldflags "-s -w" -o "$tmp/gitopscheck" .
mkdir -p "$dest"
mv -f "$tmp/gitopscheck" "$dest/gitopscheck"
echo "gitopscheck: built into $dest in $(( $(date +%s) - start ))s"
