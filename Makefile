# Thin wrappers. `make help` lists them. The README's test command is `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH_NODES ?= 2000
# The one place the image repository is defined; `make manifests` copies it into deploy/, and a
# chart test checks that charts/local-ccm/values.yaml agrees.
IMAGE ?= ghcr.io/local-ccm/local-ccm

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-18s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)

.PHONY: setup
setup: $(PY) ## install the package, test tools and Debian packages the tests need
	bash scripts/setup.sh $(PY)

# requirements.lock is committed; this rewrites it from pyproject.toml (needs PyPI). Keeps the
# locked versions unless UPGRADE=1.
.PHONY: lock
lock: $(PY) ## hash-pin the runtime dependencies for the image into requirements.lock (UPGRADE=1 to move)
	$(PY) scripts/lock.py $(if $(UPGRADE),--upgrade)

# A fresh clone gets the venv and the package on first use; `make setup` refreshes them.
$(VENV)/bin/local-ccm: | $(PY)
	bash scripts/setup.sh $(PY)

# The real-node demo needs the project's image: built here when it is missing and this machine
# can run a node (`make image` refreshes it); without a node the agent-only demo runs instead
# (`python -m tests.support.demo`), after saying why.
.PHONY: demo
demo: $(VENV)/bin/local-ccm ## the main job: the whole product on real nodes (kubelet + containerd) on a throw-away control plane
	@if $(PY) -m tests.support.demo_realnode --needs-image; then \
		$(MAKE) image || echo "demo: \`make image\` failed: the demo falls back to the agent-only one"; fi
	$(PY) -m tests.support.demo_realnode

# The image without a container registry: Debian packages through apt (mmdebstrap), the wheel
# and requirements.lock through pip --require-hashes, for linux/amd64 and linux/arm64 (qemu
# only to check the arm64 one), one OCI image index written reproducibly; each platform cached
# by the hash of its inputs. Needs root and, on a cold cache, Debian's archive;
# IMAGE_FLAGS=--fresh ignores the caches.
.PHONY: image
image: $(VENV)/bin/local-ccm ## build build/image/local-ccm-<version>.oci.tar, linux/amd64 + linux/arm64 (reproducible; prints the index digest)
	$(PY) scripts/image.py $(IMAGE_FLAGS)

# Everything an operator installs from, with checksums; the helm binary is the tests' own.
# TAG=vX.Y.Z (the release workflow's git tag) must name this version, with its CHANGELOG section,
# and the checkout must be that commit unchanged (ALLOW_DIRTY=1: a rehearsal).
.PHONY: release
release: image manifests ## write dist/: wheel, sdist, image archive, chart, manifests, SBOM, SHA256SUMS
	$(PY) scripts/release.py $(if $(TAG),--tag "$(TAG)") $(if $(filter-out 0,$(ALLOW_DIRTY)),--allow-dirty) --helm "$$($(PY) -c 'from tests.support.binaries import ensure; \
		print(ensure(["helm"], report=lambda _: None).path("helm"))')"

# Push dist/ (`make release`) to your registry and sign it: make publish REGISTRY=host/path
# COSIGN_KEY=cosign.key (COSIGN_PASSWORD in the environment); REGISTRY_CA=ca.pem for a private
# CA, REGISTRY_INSECURE=1 for plain HTTP (tests); REGISTRY_USER/REGISTRY_PASSWORD to log in;
# DIST=<dir> for a release written elsewhere (scripts/release.py --out); REPLACE=1 to push over a
# tag or chart version that holds other content (refused otherwise).
# helm and cosign are the tests' own builds. docs/install.md, "Push to your own registry".
TOOL = $$($(PY) -c 'from tests.support.binaries import ensure; \
	print(ensure(["$(1)"], report=lambda _: None).path("$(1)"))')
PUBLISH_FLAGS = --registry "$(REGISTRY)" $(if $(REGISTRY_CA),--ca-file "$(REGISTRY_CA)") \
	$(if $(filter-out 0,$(REGISTRY_INSECURE)),--insecure) $(if $(DIST),--dist "$(DIST)")
.PHONY: publish
publish: $(VENV)/bin/local-ccm ## push dist/ to REGISTRY=host/path, signed with COSIGN_KEY (image: every platform)
	$(PY) scripts/publish.py publish $(PUBLISH_FLAGS) --key "$(COSIGN_KEY)" \
		$(if $(filter-out 0,$(REPLACE)),--replace) \
		--helm "$(call TOOL,helm)" --cosign "$(call TOOL,cosign)"

.PHONY: verify
verify: $(VENV)/bin/local-ccm ## check the signatures of REGISTRY's image and chart with COSIGN_PUB
	$(PY) scripts/publish.py verify $(PUBLISH_FLAGS) --key "$(COSIGN_PUB)" \
		--cosign "$(call TOOL,cosign)"

# The forge's release page for TAG gets dist/'s top-level files (the Talos URL of
# docs/install.md is one) and the version's CHANGELOG section; gh, with GH_TOKEN. The release
# workflow's last step.
.PHONY: forge-release
forge-release: ## attach dist/ to the forge's release of TAG=vX.Y.Z (gh; the release workflow)
	$(PY) scripts/forge_release.py --tag "$(TAG)" $(if $(DIST),--dist "$(DIST)")

.PHONY: lint
lint: $(VENV)/bin/local-ccm ## ruff, ruff format --check, mypy --strict, import contracts, no import cycle
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy
	MYPYPATH=scripts $(VENV)/bin/mypy scripts
	$(VENV)/bin/lint-imports
	$(PY) tests/unit/test_import_graph.py
	$(PY) scripts/version.py check
	$(PY) tests/unit/test_repository_stands_alone.py
	$(MAKE) check-chart-docs
	$(MAKE) check-manifests

.PHONY: version
version: ## print the release version (src/local_ccm/__init__.py, the one place it is defined)
	@$(PY) scripts/version.py

# Rewrites __version__ and its copies (Chart.yaml version/appVersion, the Containerfile's
# ARG VERSION default, the demo transcript, the install commands and the chart README's pinned
# links), then everything rendered from the chart.
.PHONY: bump
bump: ## set the release version everywhere: make bump VERSION=x.y.z
	@test -n "$(VERSION)" || { echo "usage: make bump VERSION=x.y.z" >&2; exit 2; }
	$(PY) scripts/version.py bump $(VERSION)
	$(MAKE) manifests
	LOCAL_CCM_UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/integration/deploy/test_d01_d03_render.py -k golden

.PHONY: fmt
fmt: ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix src tests scripts
	$(VENV)/bin/ruff format src tests scripts

.PHONY: test-unit
test-unit: $(VENV)/bin/local-ccm ## unit tier: seconds, no root, no network
	$(PY) -m pytest -m unit

.PHONY: test-netns
test-netns: $(VENV)/bin/local-ccm ## netns tier (root, iproute2)
	$(PY) -m pytest -m "netns and not integration"

.PHONY: test-bins
test-bins: $(VENV)/bin/local-ccm ## build the control-plane binaries from the Go module proxy, or find them in the cache
	$(PY) -m tests.support.binaries ensure

.PHONY: test-integration
test-integration: test-bins image ## integration tier against a real kube-apiserver + etcd
	$(PY) -m pytest -m integration

# Runs where `make test` runs it: inside `unshare --net` with only lo.
.PHONY: test-realnode
test-realnode: test-bins image ## real-node tier: a kubelet + containerd node per module (root, cgroup v1)
	unshare --net sh -c 'ip link set lo up && exec $(PY) -m pytest -m realnode'

.PHONY: test
# The image is built before pytest starts: building it needs Debian's archive, the tests have
# no network.
# test-bins and image run side by side: the Go builds are compute, the image mostly waits on
# Debian's archive. The slowest tests are listed at the end, where a cold run's time goes.
test: $(VENV)/bin/local-ccm ## the README's test command: every tier but bench, in a network namespace with only lo
	$(MAKE) --no-print-directory -j2 test-bins image
	timeout 60m unshare --net sh -c 'ip link set lo up && exec $(PY) -m tests.support.alltiers --durations=40'

# The plots are re-drawn even when a bench failed: the results that were taken still count.
.PHONY: bench
bench: test-bins ## scale and benchmark tier (never part of make test), then `make plots BENCH_FROM=test-artifacts/bench`
	$(PY) -m pytest -m "bench and not compare" -s --bench-nodes=$(BENCH_NODES); status=$$?; \
	$(PY) -m tests.bench.plots --from test-artifacts/bench && exit $$status

# Ours vs the Go originals on the same control planes (docs/benchmarks.md). The Go sources are
# tarballs found through LOCAL_CCM_ORIGINALS_DIR (tests/bench/originals.toml pins them). Scale:
# BENCH_ROUNDS BENCH_AGENT_IDLE BENCH_AGENT_CHANGES BENCH_HOUR=1 BENCH_IPAM_NODES
# BENCH_LIFECYCLE_NODES BENCH_LIFECYCLE_WINDOW BENCH_LIFECYCLE_TIMEOUT (defaults: about 15 min);
# the LoadBalancer peers: BENCH_LB_SERVICES (comma list of sizes) BENCH_LB_ROUNDS
# BENCH_LB_KUBEVIP_MAX.
BENCH_VARS := BENCH_ROUNDS BENCH_AGENT_IDLE BENCH_AGENT_CHANGES BENCH_HOUR BENCH_IPAM_NODES \
	BENCH_LIFECYCLE_NODES BENCH_LIFECYCLE_WINDOW BENCH_LIFECYCLE_TIMEOUT \
	BENCH_LB_SERVICES BENCH_LB_ROUNDS BENCH_LB_KUBEVIP_MAX
# A real node's joins (tests/bench/test_compare_join.py: kubelet + containerd, root, cgroup v1,
# the project's image from `make image`): BENCH_JOINS joins per agent (default 10).
BENCH_VARS += BENCH_JOINS
# Another checkout's src measured beside ours in the agent, IPAM and lifecycle rounds
# (docs/benchmarks.md "Against an earlier commit").
BENCH_VARS += BENCH_BASELINE
# BENCH_RESUME=1: a run stopped midway goes on where it stopped; every part whose newest result
# in test-artifacts/bench is of this (clean) commit at these settings is kept, not run again.
BENCH_VARS += BENCH_RESUME
# The whole stack side by side (tests/bench/test_compare_stack.py): BENCH_STACK_NODES kwok
# Nodes per plane (default 100), a window of BENCH_STACK_WINDOW s (default 180; BENCH_HOUR=1
# alone makes it the hour), BENCH_STACK_AGENTS real agents measured per side (5),
# BENCH_STACK_SERVICES Services live (10), one change every BENCH_STACK_CHURN s (30).
BENCH_VARS += BENCH_STACK_NODES BENCH_STACK_WINDOW BENCH_STACK_AGENTS BENCH_STACK_SERVICES \
	BENCH_STACK_CHURN
.PHONY: bench-compare
bench-compare: test-bins image ## ours vs the Go originals, interleaved; rewrites docs/benchmarks.md's tables and plots
	$(PY) -m tests.support.originals ensure
	$(foreach v,$(BENCH_VARS),$(v)='$($(v))') timeout 8h unshare --net sh -c 'ip link set lo up && \
	  exec $(PY) -m pytest -m compare -s -p no:cacheprovider tests/bench/test_compare*.py'; status=$$?; \
	$(PY) -m tests.bench.plots --from test-artifacts/bench && \
	$(PY) -m tests.bench.compare_report && exit $$status

.PHONY: plots
plots: ## re-draw docs/bench/*.svg from docs/bench/data; BENCH_FROM=test-artifacts/bench takes newer results in
	$(PY) -m tests.bench.plots $(if $(BENCH_FROM),--from $(BENCH_FROM))

.PHONY: dev-cluster
dev-cluster: $(VENV)/bin/local-ccm ## start etcd + kube-apiserver on loopback (builds only those two on first use); prints KUBECONFIG
	$(PY) -m tests.support.controlplane dev

.PHONY: manifests
manifests: $(VENV)/bin/local-ccm ## render deploy/ from charts/local-ccm; never edit deploy/ by hand
	$(PY) -m tests.support.chart manifests deploy --image $(IMAGE)

.PHONY: chart-docs
chart-docs: $(VENV)/bin/local-ccm ## regenerate the values table of charts/local-ccm/README.md from values.schema.json and values.yaml
	$(PY) scripts/chart_docs.py

.PHONY: check-chart-docs
check-chart-docs: chart-docs ## fail if the chart README's values table differs from a fresh one
	git diff --exit-code -- charts/local-ccm/README.md

.PHONY: check-manifests
check-manifests: manifests ## fail if a fresh render of deploy/ differs from what git has
	git diff --exit-code -- deploy/
	@untracked="$$(git ls-files --others --exclude-standard -- deploy/)"; \
	if [ -n "$$untracked" ]; then echo "not in git: $$untracked"; exit 1; fi
