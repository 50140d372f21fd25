#!/usr/bin/env bash
# Run e2e/cluster on kind (for people who have Docker and kind): build both images with
# Docker (the runtime as the CPU build, as the local cluster does), load them into the kind
# cluster, install the chart with the operator as a pod, advertise 2 fake GPUs on the node,
# then run the scenarios against it.
#
#   e2e/kind.sh                 # creates the kind cluster "docparser-e2e" if it does not exist
#   KIND_CLUSTER=mine e2e/kind.sh -k canary   # extra arguments go to pytest
#
# The scenarios reach Services by ClusterIP from the host: on kind that needs a route to the
# service range through the node container (added below, Linux hosts only).
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-docparser-e2e}
for tool in docker kind kubectl helm; do
	command -v "$tool" >/dev/null || { echo "kind.sh: $tool is required" >&2; exit 2; }
done
kind get clusters | grep -qx "$cluster" || kind create cluster --name "$cluster"
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
kind get kubeconfig --name "$cluster" > "$kubeconfig"
export KUBECONFIG=$kubeconfig

docker build -f Dockerfile.runtime -t docparser/runtime:dev \
	--build-arg BASE_IMAGE=debian:bookworm-slim --build-arg EXTRAS=cloud \
	--build-arg LOCK=runtime/requirements-image-cpu.lock .
docker build -f Dockerfile.operator -t docparser/operator:dev .
kind load docker-image --name "$cluster" docparser/runtime:dev docparser/operator:dev

helm upgrade --install docparser-operator charts/docparser-operator \
	--namespace docparser-system --create-namespace --take-ownership \
	--set image.repository=docparser/operator --set image.tag=dev --set image.pullPolicy=Never \
	--wait --timeout 5m

node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
kubectl patch node "$node" --subresource=status --type=merge \
	-p '{"status":{"capacity":{"nvidia.com/gpu":"2"}}}'

# ClusterIPs from the host: route the service range via the node container's address.
node_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$cluster-control-plane")
service_cidr=$(kubectl cluster-info dump 2>/dev/null | grep -m1 -o -- '--service-cluster-ip-range=[0-9./]*' | cut -d= -f2)
if [ -n "$service_cidr" ] && [ "$(id -u)" -eq 0 ]; then
	ip route replace "$service_cidr" via "$node_ip"
else
	echo "kind.sh: add a route to the service range via $node_ip (as root) so ClusterIPs answer" >&2
fi

DOCPARSER_E2E_KUBECONFIG=$kubeconfig DOCPARSER_E2E_RUNTIME_IMAGE=docparser/runtime:dev \
	python3 -m pytest e2e/cluster -m cluster -v "$@"
