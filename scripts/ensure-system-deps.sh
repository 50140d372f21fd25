#!/usr/bin/env bash
# Installs the Debian packages the test suite needs: real servers (redis-server), a
# CJK font (fonts-wqy-microhei) to render the Chinese test page, and what the local
# cluster's node runs on (containerd, runc, CNI plugins, iptables) and builds its images
# with (debootstrap, buildah, umoci).
# Idempotent: does nothing when they are present. Needs root (CI runs as root);
# otherwise prints what to install and lets the dependent tests skip.
set -uo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# A CJK font for the CPU engine's Chinese test page (tests/runtime/documents.py).
[ -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || need+=(fonts-wqy-microhei)
# The local cluster (hack/controlplane/localcluster): a real node and our images, no registry.
for pair in containerd:containerd runc:runc iptables:iptables debootstrap:debootstrap \
	buildah:buildah umoci:umoci conntrack:conntrack; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
# promtool (Debian's prometheus package) runs the chart's alert-rule unit tests.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${need[*]} (not root): install them to run the tests that need them" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
  || echo "could not install ${need[*]}: dependent tests will be skipped" >&2
exit 0
