#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager) from Go modules into
# ~/.cache/docparser/controlplane/<version>/, outside the clone, so the realcluster tests can run a real API server.
#
# WHY a cache keyed by version + go.sum: the cold build compiles most of Kubernetes (many minutes on a small
# machine); every later `make test` must only notice the binaries are there and return in well under a second.
# Exit status: 0 when the binaries are ready (built or cached), 1 when they cannot be built (no Go, build error);
# the Makefile tolerates 1 and the realcluster tests then skip with a message.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=$(tr -d '[:space:]' < "$here/KUBE_VERSION")
cache_root="${DOCPARSER_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docparser/controlplane}"
dest="$cache_root/$version"
# Two sets, each with its own stamp: the node set (for the local cluster, see localcluster/) can
# fail or time out without costing the control plane the realcluster tests need.
controlplane_set=(etcd kube-apiserver kube-controller-manager)
node_set=(kubelet kube-scheduler kube-proxy kubectl)
stamp_value=$(cat "$here/go.mod" "$here/go.sum" "$here/cmd/etcd/main.go" "$here/build.sh" | cksum | cut -d' ' -f1)

have_set() { # name binaries...
	local name=$1; shift
	for b in "$@"; do [ -x "$dest/$b" ] || return 1; done
	[ "$(cat "$dest/.stamp-$name" 2>/dev/null)" = "$stamp_value" ]
}

if have_set controlplane "${controlplane_set[@]}" && have_set node "${node_set[@]}"; then
	echo "controlplane: cached kubernetes $version binaries in $dest (${controlplane_set[*]} ${node_set[*]}); nothing to build"
	exit 0
fi

GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
	echo "controlplane: Go not found and no cached binaries in $dest; cannot build the control plane" >&2
	exit 1
fi

minor=${version#v1.}; minor=${minor%%.*}
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
# Stamp both version packages the way hack/lib/version.sh does, so `kube-apiserver --version` and /version
# report the pinned release instead of v0.0.0-master.
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

tmp="$dest.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cd "$here"

build_set() { # name packages... ; binaries are the packages' last path elements
	local name=$1; shift
	local names=()
	for pkg in "$@"; do names+=("${pkg##*/}"); done
	if have_set "$name" "${names[@]}"; then
		echo "controlplane: cached $name binaries (${names[*]})"
		return 0
	fi
	echo "controlplane: building kubernetes $version $name (${names[*]}) with $("$GO" env GOVERSION) into $dest"
	echo "controlplane: GOMODCACHE=$("$GO" env GOMODCACHE) GOCACHE=$("$GO" env GOCACHE); a cold build takes many minutes"
	local start
	start=$(date +%s)
	# -p 2 and GOMAXPROCS=2 keep the compile and the (memory-hungry) link from swamping a small shared machine.
	CGO_ENABLED=0 GOMAXPROCS=${GOMAXPROCS:-2} nice -n 10 "$GO" build -p "${BUILD_JOBS:-2}" -trimpath \
		-ldflags "$ldflags" -o "$tmp/" "$@" || return 1
	mkdir -p "$dest"
	for b in "${names[@]}"; do mv -f "$tmp/$b" "$dest/$b"; done
	echo "$stamp_value" > "$dest/.stamp-$name"
	echo "controlplane: built $name in $(( $(date +%s) - start ))s"
}

build_set controlplane ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
echo "controlplane: $("$dest/kube-apiserver" --version), etcd $("$dest/etcd" --version | sed -n 's/^etcd Version: //p')"
build_set node k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
