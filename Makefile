# docparser: two commands matter, `make run` and `make test` (see README.md).
# Downloads and builds are cached outside the clone (~/.cache), so repeated runs are fast.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/docparser
UV_BOOT := $(CACHE)/uv-bootstrap
UV := $(UV_BOOT)/bin/uv
export UV_CACHE_DIR ?= $(CACHE)/uv
export UV_LINK_MODE ?= hardlink
# Python writes each module's bytecode on first import and every later process reuses it. Some
# shells here export PYTHONDONTWRITEBYTECODE=1: then every server, worker and CLI the suite
# starts compiles torch, transformers and fastapi from source again (phase 1 took 869 CPU-s
# instead of 522; a runtime server 3.7 s to ready instead of 1.4). __pycache__ is git- and
# docker-ignored, and the image hash skips it.
unexport PYTHONDONTWRITEBYTECODE
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-test run test test-fast lint lint-checks typecheck-deepseek fmt controlplane seaweedfs \
	system-deps bench \
	images images-lock cluster-images cluster-up cluster-down clean \
	test-cluster-repeat test-realcluster-repeat

# uv installs from a shared cache (torch is several GB); pip is only used to get uv.
$(UV):
	$(PYTHON) -m venv $(UV_BOOT)
	$(UV_BOOT)/bin/pip install --quiet uv==0.13.9

$(BIN)/python: | $(UV)
	$(UV) venv --python $(PYTHON) $(VENV)

# Base install: both distributions, no torch (what `make run` needs).
$(VENV)/.installed-base: runtime/pyproject.toml operator/pyproject.toml | $(BIN)/python
	$(UV) pip install --python $(BIN)/python -e ./runtime -e ./operator
	touch $@

# Lint install: the base install plus ruff, import-linter and mypy (no torch).
$(VENV)/.installed-lint: $(VENV)/.installed-base requirements-lint.txt
	$(UV) pip install --python $(BIN)/python -r requirements-lint.txt
	touch $@

# Test install: adds the DeepSeek-OCR-2 extra (torch, transformers), OpenTelemetry and test tools.
$(VENV)/.installed-test: $(VENV)/.installed-lint requirements-test.txt
	$(UV) pip install --python $(BIN)/python -e './runtime[deepseek,otel]' -e ./operator -r requirements-test.txt
	touch $@

install: $(VENV)/.installed-base

install-test: $(VENV)/.installed-test

run: install
	$(BIN)/docparser-runtime serve --engine rapidocr --host $(HOST) --port $(PORT)

# Services and binaries the suite needs: redis-server (Debian) and the control plane.
system-deps:
	@bash scripts/ensure-system-deps.sh

# Built (and the Gateway API CRDs fetched) from Go modules (gitopscheck: Flux's kstatus and Argo CD's
# gopher-lua, small, first) into ~/.cache/docparser (skipped in
# seconds once cached). A cold
# build is bounded so CI always reaches the tests: past the bound the dependent tests skip,
# and the Go build cache makes the next run pick up where this one stopped.
CONTROLPLANE_BUILD_TIMEOUT ?= 3000
HELM_BUILD_TIMEOUT ?= 900
GITOPSCHECK_BUILD_TIMEOUT ?= 600
ENVOY_GATEWAY_BUILD_TIMEOUT ?= 900
controlplane: install-test
	@timeout $(GITOPSCHECK_BUILD_TIMEOUT) bash hack/gitopscheck/build.sh \
		|| echo "gitopscheck build failed or timed out: Flux/Argo CD verdict tests will be skipped"
	@timeout $(CONTROLPLANE_BUILD_TIMEOUT) bash hack/controlplane/build.sh \
		|| echo "control plane build failed or timed out: realcluster tests will be skipped"
	@timeout $(HELM_BUILD_TIMEOUT) bash scripts/build-helm.sh \
		|| echo "helm build failed or timed out: chart tests will be skipped"
	@timeout $(ENVOY_GATEWAY_BUILD_TIMEOUT) bash scripts/build-envoy-gateway.sh \
		|| echo "Envoy Gateway not built or timed out: the local cluster has no Gateway controller and its Gateway scenarios will be skipped"
	@$(BIN)/python hack/controlplane/gateway_crds.py \
		|| echo "Gateway API CRDs not fetched: realcluster and HTTPRoute schema tests will be skipped"

# The S3 tests' real S3 server: SeaweedFS's `weed` (its S3 gateway), built from its Go module into
# ~/.cache/docparser/seaweedfs (hack/seaweedfs/build.sh; seconds once cached) and bounded like
# the control plane: past the bound the S3 tests skip and say why. Those tests run the runtime from
# .venv/cloud, the runtime with its `cloud` extra (s3fs) as in the runtime image: botocore pins
# python-dateutil<3, which the test venv's Kubernetes client (>=3) cannot share.
SEAWEEDFS_BUILD_TIMEOUT ?= 1800
CLOUD_VENV := $(VENV)/cloud
$(CLOUD_VENV)/.installed-cloud: runtime/pyproject.toml | $(BIN)/python
	$(UV) venv --allow-existing --python $(PYTHON) $(CLOUD_VENV)
	$(UV) pip install --python $(CLOUD_VENV)/bin/python -e './runtime[cloud]'
	touch $@

seaweedfs: $(CLOUD_VENV)/.installed-cloud
	@timeout $(SEAWEEDFS_BUILD_TIMEOUT) bash hack/seaweedfs/build.sh \
		|| echo "SeaweedFS weed build failed or timed out: the S3 tests will be skipped"

# ruff (check and format), the import contracts of pyproject.toml and mypy --strict. The
# DeepSeek engine needs torch, which the lint install leaves out: its strict run joins only
# where torch is installed (`make test`; docs/architecture.md, "Typing").
lint-checks:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	@if $(BIN)/python -c 'import importlib.util, sys; sys.exit(not importlib.util.find_spec("torch"))'; \
	then $(MAKE) --no-print-directory typecheck-deepseek; \
	else echo "torch is not installed: the DeepSeek engine is type-checked by make test"; fi

DEEPSEEK_SOURCES := $(wildcard runtime/docparser_runtime/engines/deepseek_ocr2/*.py)
typecheck-deepseek: $(VENV)/.installed-test
	$(BIN)/mypy $(DEEPSEEK_SOURCES)

# The local cluster's images (scripts/build_images.py: a Debian base from debootstrap, buildah,
# no registry; cached by content hash). Bounded like the control plane: when they are not
# built, the e2e/cluster scenarios skip and say why.
CLUSTER_IMAGES_TIMEOUT ?= 1800
cluster-images: system-deps
	@timeout $(CLUSTER_IMAGES_TIMEOUT) $(PYTHON) scripts/build_images.py >/dev/null \
		|| echo "images not built or timed out: the e2e/cluster scenarios will be skipped"

# A real cluster of NODES nodes on this machine (root): see docs/operations.md.
NODES ?= 3
cluster-up: install-test system-deps controlplane
	cd hack && ../$(BIN)/python -m controlplane.localcluster up --nodes $(NODES)

cluster-down:
	cd hack && ../$(BIN)/python -m controlplane.localcluster down

# Three sessions, arranged around the longest. The real-pod scenarios on the shared 3-node local
# cluster (about 23 min) start first, in the background, and stream their lines prefixed with
# `[cluster]`. Meanwhile the lint checks run (ruff, import-linter, mypy --strict: about 50 s on a
# fresh clone, which the cluster session used to wait for), then the tests that need no cluster
# run on TEST_WORKERS processes (pytest-xdist), then the real-API-server scenarios (etcd +
# kube-apiserver + kube-controller-manager, stand-in kubelets), also on TEST_WORKERS processes:
# each worker starts its own control plane (about 10 s), and the scenarios mostly wait on
# windows and controllers, so two halve their 11 minutes. The cluster scenarios mostly wait on
# their control plane, pods and windows, and none samples a wall-clock target, so the two
# foreground sessions fit inside the cluster's time instead of adding to it (the layout before
# this one ran them in turn: 36 min in CI). Every session always runs; the target fails if any
# did.
TEST_WORKERS ?= 2
test: install-test system-deps controlplane seaweedfs cluster-images
	@status=0; \
	( $(BIN)/python -m pytest -p no:cacheprovider -m "cluster and not measure" --durations=15 $(PYTEST_ARGS) 2>&1 \
		| sed -u 's/^/[cluster] /'; exit $${PIPESTATUS[0]} ) & cluster=$$!; \
	$(MAKE) --no-print-directory lint-checks || status=$$?; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not realcluster and not cluster" \
		$(PYTEST_ARGS) || status=$$?; \
	$(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal \
		-m "realcluster and not cluster" --durations=10 $(PYTEST_ARGS) || status=$$?; \
	echo "---- waiting for the cluster session ([cluster] lines) ----"; \
	wait $$cluster || status=$$?; \
	exit $$status

# A race hunt on demand (docs/architecture.md, "Testing"): the scenarios N times, each run in a
# new shuffled order (its seed printed), then a table of each scenario's passes and its first
# failure. The cluster scenarios all run on one local cluster, started once if none runs.
# PYTEST_ARGS narrow it, e.g. PYTEST_ARGS=e2e/cluster/test_cluster_drains.py.
N ?= 3
SEED ?=
CLUSTER_SCENARIOS ?= e2e/cluster
test-cluster-repeat: install-test system-deps controlplane cluster-images
	$(BIN)/python e2e/race_hunt.py --runs $(N) $(if $(SEED),--seed $(SEED)) --local-cluster \
		-- -m cluster --durations=15 $(or $(PYTEST_ARGS),$(CLUSTER_SCENARIOS))

# The same for the real-API-server tests that sample transitions.
REALCLUSTER_SCENARIOS ?= tests/operator/controller/test_rollout_transitions.py \
	tests/operator/core/plan/test_node_drains.py tests/operator/controller/test_drains.py
test-realcluster-repeat: install-test controlplane
	$(BIN)/python e2e/race_hunt.py --runs $(N) $(if $(SEED),--seed $(SEED)) \
		-- -m "realcluster and not cluster" $(or $(PYTEST_ARGS),$(REALCLUSTER_SCENARIOS))

test-fast: install-test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not slow and not realcluster and not cluster" $(PYTEST_ARGS)

lint: $(VENV)/.installed-lint
	$(MAKE) --no-print-directory lint-checks

fmt: $(VENV)/.installed-lint
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install-test
	$(BIN)/python bench/runtime.py
	$(BIN)/python bench/operator.py

# The runtime (CPU) and operator images, built locally with buildah on a debootstrapped
# Debian base, no registry (root; see docs/operations.md "Images"). Prints one line per image:
# `image <name containerd imports it as> <OCI archive>`. IMAGES_ARGS: e.g. --only runtime.
images:
	$(PYTHON) scripts/build_images.py $(IMAGES_ARGS)

# Regenerate the pinned, hashed locks the images install from (after a pyproject change).
images-lock: | $(UV)
	UV=$(UV) bash scripts/images-lock.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
