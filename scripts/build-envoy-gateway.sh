#!/usr/bin/env bash
# Builds Envoy Gateway's control plane (pinned) from its Go module into
# ~/.cache/docparser/envoy-gateway/<version>/, outside the clone, with the CRDs it ships: the
# Gateway API's standard channel at the version it requires, and its own (EnvoyProxy, ...).
# `make cluster-up` runs it against the local cluster, so a real Gateway API implementation
# judges the HTTPRoutes the operator renders.
#
# WHY from the module and a copy: the module cache is read-only, and `go build` in a copy of the
# module resolves exactly the versions its go.sum pins (no `go install` of a main package with
# replace directives, which Go refuses). Cached: later runs return at once.
# Exit status 0 when ready, 1 when it cannot be built (no Go, build error, timeout by the caller):
# the Gateway scenarios then skip and say so.
set -euo pipefail
module=github.com/envoyproxy/gateway
version=v1.9.1
dest="${XDG_CACHE_HOME:-$HOME/.cache}/docparser/envoy-gateway/$version"
if [ -x "$dest/envoy-gateway" ] && [ -f "$dest/crds/.complete" ]; then
	echo "envoy-gateway: cached $version in $dest"
	exit 0
fi
GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
	echo "envoy-gateway: Go not found; the Gateway scenarios will be skipped" >&2
	exit 1
fi
start=$(date +%s)
src=$(cd /tmp && GOFLAGS=-mod=mod "$GO" mod download -json "$module@$version" \
	| sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "envoy-gateway: go mod download $module@$version failed" >&2; exit 1; }
work=$(mktemp -d /tmp/envoy-gateway-build.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
rm -rf "$dest.tmp/crds" "$dest.tmp/chart"
mkdir -p "$dest.tmp/crds"
echo "envoy-gateway: building $version with $("$GO" env GOVERSION) (a cold build takes minutes)"
(cd "$work" && CGO_ENABLED=0 GOMAXPROCS=${GOMAXPROCS:-2} GOFLAGS=-buildvcs=false nice -n 10 \
	"$GO" build -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" -o "$dest.tmp/envoy-gateway" \
	./cmd/envoy-gateway)
# The CRDs chart wraps each file in one `{{- if ... }}` / `{{- end }}` pair: dropped here.
crds="$work/charts/gateway-crds-helm/templates"
for f in "$crds/standard-gatewayapi-crds.yaml" "$crds"/generated/*.yaml; do
	sed '/^{{-/d' "$f" > "$dest.tmp/crds/$(basename "$f")"
done
# Its Helm chart (the way users install it), values rendered from the release template; the
# image is ours (built from this binary by the local cluster), so it is set at install.
cp -r "$work/charts/gateway-helm" "$dest.tmp/chart"
sed -e 's#\${GatewayImage}#docparser/envoy-gateway:'"$version"'#' -e 's#\${GatewayImagePullPolicy}#Never#' \
	"$dest.tmp/chart/values.tmpl.yaml" > "$dest.tmp/chart/values.yaml"
rm "$dest.tmp/chart/values.tmpl.yaml"
touch "$dest.tmp/crds/.complete"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "envoy-gateway: built $version into $dest in $(( $(date +%s) - start ))s"
