#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (its S3 gateway is the real S3-compatible server of the S3 tests, see
# README.md) from the Go module pinned in go.mod into ~/.cache/docparser/seaweedfs/<version>/,
# outside the clone, as tests/controlplane/build.sh does for the control plane.
#
# WHY a cache keyed by version + go.sum: the cold build compiles SeaweedFS and its several hundred
# dependencies (many minutes on 2 cores); every later `make test` only notices the binary is there.
# Exit status: 0 when the binary is ready (built or cached), 1 when it cannot be built (no Go, no
# module proxy, a build error). The Makefile bounds it with a timeout and tolerates a failure; the
# S3 tests then skip and say why. The Go build cache keeps what a cut-off build compiled, so the
# next run picks up where this one stopped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=$(tr -d '[:space:]' < "$here/SEAWEEDFS_VERSION")
cache_root="${DOCPARSER_SEAWEEDFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docparser/seaweedfs}"
dest="$cache_root/$version"
stamp_value=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | cksum | cut -d' ' -f1)

have_weed() { [ -x "$dest/weed" ] && [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp_value" ]; }
if [ "${1:-}" = "--path" ]; then # where the binary of this tree is, if it is built (for the tests)
	have_weed && echo "$dest/weed"
	exit $?
fi
if have_weed; then
	echo "seaweedfs: cached weed $version in $dest; nothing to build"
	exit 0
fi

GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
	echo "seaweedfs: Go not found and no cached weed in $dest; the S3 tests will be skipped" >&2
	exit 1
fi
need=$(sed -n 's/^go \(.*\)$/\1/p' "$here/go.mod")
have=$("$GO" env GOVERSION)
if [ "$(printf '%s\n%s\n' "go$need" "$have" | sort -V | head -n1)" != "go$need" ]; then
	echo "seaweedfs: $have is older than go$need, which SeaweedFS $version needs" >&2
	exit 1
fi

mkdir -p "$cache_root"
tmp="$cache_root/.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
echo "seaweedfs: building weed $version with $have into $dest (a cold build takes many minutes)"
start=$(date +%s)
# The default build: the optional stores (rocksdb, tikv, ydb, ...) sit behind build tags left off.
# -mod=readonly: go.sum is committed, so a build never rewrites it. -p 2 and GOMAXPROCS=2 keep the
# compile and the memory-hungry link from swamping a small shared machine (2 cores here).
CGO_ENABLED=0 GOMAXPROCS=${GOMAXPROCS:-2} GOFLAGS=-mod=readonly nice -n 10 \
	"$GO" build -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" -o "$tmp/weed" \
	github.com/seaweedfs/seaweedfs/weed
mkdir -p "$dest"
mv -f "$tmp/weed" "$dest/weed"
echo "$stamp_value" > "$dest/.stamp"
echo "seaweedfs: built weed into $dest in $(( $(date +%s) - start ))s ($("$dest/weed" version 2>&1 | head -n1))"
