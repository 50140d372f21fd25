#!/usr/bin/env bash
# Builds helm (pinned) from its Go module into ~/.cache/docparser/helm/<version>/helm, outside the
# clone, so tests/operator/api/test_chart.py can lint and render the chart. Cached: later runs return at once.
# Exit status 0 when helm is ready, 1 when it cannot be built (no Go): the chart tests then skip.
set -euo pipefail
version=v3.22.0
dest="${XDG_CACHE_HOME:-$HOME/.cache}/docparser/helm/$version"
if [ -x "$dest/helm" ]; then
	echo "helm: cached $version in $dest"
	exit 0
fi
GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
	echo "helm: Go not found; chart render tests will be skipped" >&2
	exit 1
fi
mkdir -p "$dest"
GOBIN="$dest" GOFLAGS=-buildvcs=false "$GO" install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$version"
echo "helm: built $version into $dest"
