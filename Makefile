# switchyard: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE ?= $(HOME)/.cache/switchyard
export SWITCHYARD_CACHE := $(CACHE)

.PHONY: help install deps tools generate check-generated test unit integration e2e demo down bench bench-planner bench-xcache bench-fleet bench-install soak bench-reliability helm-lint dockerfile-test e2e-chart clean

help:
	@echo "make demo      start a local simulated cluster, run the operator, apply examples/facility.yaml"
	@echo "make down      remove the demo cluster and stop its operator"
	@echo "make test      all tests: unit, integration (real xrootd, Prometheus), e2e (local cluster)"
	@echo "make generate  write CRDs, chart copies, dashboards and the values schema"
	@echo "make bench     run the benchmarks; reports go to bench/results/"

$(VENV)/.installed: operator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e 'operator[test]'
	touch $@

install: $(VENV)/.installed

deps: ## system packages the integration tests run for real (needs root and apt)
	bash hack/install-system-deps.sh

tools: ## pinned Kubernetes, etcd, kwok, helm, kind and kube-score binaries, cached in $(CACHE)/bin
	bash hack/build-tools.sh >/dev/null

generate: install
	cd operator && ../$(PY) -m switchyard.generate ..

check-generated: install
	$(PY) -m pytest -q operator/tests/unit/test_generated.py

unit: install
	$(PY) -m pytest -q operator/tests/unit

integration: install deps tools
	CI=1 $(PY) -m pytest -q -m integration operator/tests/integration

# The fault suite at full size (10 kills on 1,000 workers, 30 s and 120 s outages,
# 500 churn cycles, 1,000 hostile specs); `make test` runs it scaled down.
soak: install tools
	SWITCHYARD_SOAK=1 SWITCHYARD_RELIABILITY_REPORT=1 $(PY) -m pytest -q e2e/test_faults.py e2e/test_replan.py
	$(PY) bench/reliability_report.py

bench-reliability: install tools
	rm -f bench/results/reliability.json
	SWITCHYARD_RELIABILITY_REPORT=1 $(PY) -m pytest -q e2e/test_faults.py e2e/test_replan.py
	$(PY) bench/reliability_report.py

helm-lint: tools
	$(CACHE)/bin/helm lint --strict charts/switchyard
	$(CACHE)/bin/helm lint --strict charts/switchyard --set watch.mode=namespaced --set 'watch.namespaces={a,b}'

dockerfile-test: install
	$(PY) -m pytest -q operator/tests/unit/test_dockerfile.py

e2e-chart: install tools
	SWITCHYARD_E2E_CLUSTER=sy-chart $(PY) -m pytest -q e2e/test_chart_install.py

e2e: install tools
	$(PY) -m pytest -q e2e

# CI=1: a real component that is missing fails its tests instead of skipping them.
# SWITCHYARD_REAL_NODES=1: the e2e on real kubelet nodes runs too (the images, root).
# The real-node modules (one real-node cluster at a time: they run one after another) run beside
# the rest, on clusters of their own; both mostly wait. Their output follows the rest's. They run
# at a lower CPU priority (nice): their image pushes and pulls burn CPU for minutes, and the rest
# has tests that wait a minute for a reconcile (a rehearsal without it: the dashboards test's
# prediction ratio did not come within 60 s while test_real_nodes pushed its images). They start
# after the integration tests: in three runs beside the real-node modules, a real cache's xrd.report
# summaries stopped for over 30 s (a plain UDP listener saw them stop too: the xrootd, not the
# exporter; never alone, in a dozen runs), and the routing rig measures every read by those summaries.
REAL_NODE_TESTS := e2e/test_real_nodes.py e2e/test_network_policy_real.py e2e/test_ring_real.py e2e/test_leader_real.py
# The real-node modules, then the kind e2e (kind-run), run beside the rest: one after the other, as
# both start kubelets on this machine and kind's removal clears the CNI chains once no pod is left.
test: install deps tools images kind-deps
	@mkdir -p $(CACHE)/e2e-logs
	@CI=1 $(PY) -m pytest -q operator/tests/integration; integration=$$?; \
	{ CI=1 SWITCHYARD_REAL_NODES=1 nice -n 10 $(PY) -m pytest -q -p no:cacheprovider $(REAL_NODE_TESTS); real_rc=$$?; \
	  nice -n 10 $(MAKE) --no-print-directory kind-run KIND_KEEP=0 || real_rc=1; exit $$real_rc; } \
	  >$(CACHE)/e2e-logs/make-test-real-nodes.log 2>&1 & real=$$!; \
	CI=1 $(PY) -m pytest -q operator/tests e2e --ignore=operator/tests/integration $(addprefix --ignore=,$(REAL_NODE_TESTS)); rest=$$?; \
	[ $$integration -eq 0 ] || rest=1; \
	wait $$real; real_rc=$$?; \
	echo "=== the real-node e2e ($(REAL_NODE_TESTS)) and the kind e2e, run beside the above ==="; \
	cat $(CACHE)/e2e-logs/make-test-real-nodes.log; \
	echo "make test: the rest exited $$rest, the real-node and kind e2e $$real_rc"; \
	[ $$rest -eq 0 ] && [ $$real_rc -eq 0 ]

demo: install tools
	$(PY) hack/demo.py up

down: install
	$(PY) hack/demo.py down

bench: bench-planner bench-xcache bench-fleet

# docs/admin-guide.md's pictures of the bench's Chicago-like and Nebraska-like plans (switchyard plan -o png).
.PHONY: plan-pictures
plan-pictures: install
	for case in chicago nebraska; do \
	  $(VENV)/bin/switchyard plan -f bench/topologies/$$case-facility.yaml --topology bench/topologies/$$case.yaml \
	    -o png > docs/plans/$$case.png; done

$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e 'operator[test,bench]'
	touch $@

bench-install: $(VENV)/.bench-installed

bench-planner: bench-install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash bench/run-planner.sh

bench-xcache: bench-install deps
	$(PY) bench/xcache_bench.py

# Fleet start-up (bench/results/fleet.md). FLEET_ARGS sets the size, e.g. the 10,000-worker run:
# FLEET_ARGS='--workers 10000 --fleets 3 --name sy-fleet10k' (see bench/run-fleet.sh).
bench-fleet: bench-install tools
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash bench/run-fleet.sh $(FLEET_ARGS)

# 500 workers through dask-gateway: switchyard's backend against the gateway's own
# KubeBackend (its controller run locally), on cluster sy-gwbench; bench/results/gateway.md.
# GATEWAY_ARGS e.g. --repeats 1 --settings unthrottled.
.PHONY: bench-gateway
GATEWAY_ARGS ?=
bench-gateway: install tools
	$(PY) bench/gateway_bench.py $(GATEWAY_ARGS)

# Real bytes through an emulated switch fabric (network namespaces + tc, needs root):
# bench/results/fabric.md and fabric.png. FABRIC_ARGS e.g. --cases chicago:1.5 --repeats 3.
.PHONY: bench-fabric fabric-down
FABRIC_ARGS ?=
bench-fabric: bench-install deps
	$(PY) bench/fabric_bench.py $(FABRIC_ARGS)

# Readers outside Kubernetes on the emulated fabric (issue 31's acceptance, needs root): HTCondor racks' readers routed by
# `switchyard route` from the caches' exporters, with and without switchyard's workers, measured ÷ the plan's fair
# share; bench/results/outside-readers.md, .json. OUTSIDE_READERS_ARGS e.g. --repeats 1 --window 8 --out /tmp.
.PHONY: bench-outside-readers
OUTSIDE_READERS_ARGS ?=
bench-outside-readers: bench-install deps
	$(PY) bench/outside_readers_bench.py $(OUTSIDE_READERS_ARGS)

# Hot spots on the emulated fabric (issue 30 item 4, needs root): Zipf popularity, static ring against hot-file
# replicas, real caches and readers; bench/results/hotspots.md, .json, .png. HOTSPOTS_ARGS e.g. --exponents 1.1 --repeats 1.
.PHONY: bench-hotspots
HOTSPOTS_ARGS ?=
bench-hotspots: bench-install deps
	$(PY) bench/hotspots_bench.py $(HOTSPOTS_ARGS)

# Prestage beside analysis on the emulated fabric (issue 30's prestage acceptance, needs root): switchyard's prestage
# runner at wanShare 0.5 of a shaped WAN while readers read files no cache holds; the analysis' WAN Gbps ÷ the rest
# of the WAN, and a pass over the prestaged files with 0 origin bytes; bench/results/prestage.md, .json.
# PRESTAGE_ARGS e.g. a ~2 min smoke run: --repeats 1 --windows 2 --window 20 --warmup 10 --out /tmp/prestage.
.PHONY: bench-prestage
PRESTAGE_ARGS ?=
bench-prestage: bench-install deps
	$(PY) bench/prestage_bench.py $(PRESTAGE_ARGS)

# Remove every namespace (with its links and processes) a fabric run made (named syfab-*), also after a crash.
fabric-down:
	$(PYTHON) e2e/fabric.py down

# The fabric bench on real kubelet nodes (bench/fabric_real_bench.py): the operator's pods, shaped links,
# real bytes against the fair share; bench/results/fabric-real.md. fabric-real-down cleans up after a killed run.
.PHONY: bench-fabric-real fabric-real-down
FABRIC_REAL_ARGS ?=
bench-fabric-real: install realnode-deps tools images
	$(PY) bench/fabric_real_bench.py $(FABRIC_REAL_ARGS)

fabric-real-down: install
	$(PY) bench/fabric_real_bench.py down

clean:
	rm -rf $(VENV) operator/*.egg-info

# Container images and real kubelet nodes (docs/real-nodes.md).
.PHONY: images realnode-deps e2e-real realnodes-down
REGISTRY ?= localhost
PUSH ?= 0
# false: push to a registry served over plain HTTP (as the real-node e2e's local one is).
PUSH_TLS_VERIFY ?= true
REAL_CLUSTER ?= sy-real

realnode-deps: ## buildah, debootstrap, containerd, runc, CNI plugins, iptables (needs root and apt)
	bash hack/install-realnode-deps.sh >/dev/null

# The operator, XCache, Dask worker, dask-gateway and pause images, built with buildah into
# $(CACHE)/images (OCI archives, rebuilt only when their inputs change).
# At a site: make images REGISTRY=registry.example.org/t2 PUSH=1 pushes the operator, XCache,
# Dask, gateway and pause images as registry.example.org/t2/switchyard:0.1.0 and so on.
images: realnode-deps tools
	REGISTRY=$(REGISTRY) PUSH=$(PUSH) PUSH_TLS_VERIFY=$(PUSH_TLS_VERIFY) bash hack/build-images.sh

# The dask-gateway image the chart's gateway.image names (dask-gateway-server +
# switchyard[gateway]) is one of `make images` (the real-node e2e runs it); the old name stays.
.PHONY: image-gateway
image-gateway: images

# The e2e on real kubelet nodes alone (`make test` runs it too).
e2e-real: install realnode-deps tools images
	SWITCHYARD_REAL_NODES=1 SWITCHYARD_REAL_CLUSTER=$(REAL_CLUSTER) $(PY) -m pytest -q $(REAL_NODE_TESTS)

# Remove the real nodes of $(REAL_CLUSTER) and its cluster, also after a run that died.
realnodes-down: install
	cd e2e && ../$(PY) realnodes.py down --cluster $(REAL_CLUSTER); \
	  ../$(PY) localcluster.py down --name $(REAL_CLUSTER)

# kind with the podman provider (docs/kind.md, issue 32): switchyard's own kind node image
# (hack/build-images.sh kind, cached by its inputs), the 7 nodes of e2e/kind/cluster.yaml, the
# images loaded, the chart installed under Pod Security "restricted", e2e/kind/facility.yaml Ready with
# its caches and workers on the planned switches and a read through a cache (e2e/kind/up.sh); then
# everything removed, also when a step failed (KIND_KEEP=1 keeps a good
# cluster: $(CACHE)/kind/kubeconfig). Needs root. `make test` runs it too (kind-run: without the prerequisites,
# which `make test` has already made), after the real-node modules.
.PHONY: kind-deps e2e-kind kind-run kind-down
KIND_KEEP ?= 0
kind-deps: realnode-deps ## podman, the CNI dnsname plugin, /lib/modules (needs root and apt)
	bash hack/install-kind-deps.sh >/dev/null

e2e-kind: kind-deps tools images
	$(MAKE) --no-print-directory kind-run

kind-run:
	bash hack/build-images.sh kind
	bash e2e/kind/up.sh; rc=$$?; \
	  PATH=$(CACHE)/bin:$$PATH kubectl --kubeconfig $(CACHE)/kind/kubeconfig get analysisfacility kind 2>/dev/null; \
	  if [ $$rc -ne 0 ] || [ "$(KIND_KEEP)" != 1 ]; then bash e2e/kind/down.sh || rc=1; fi; exit $$rc

# Remove the kind cluster's nodes, volumes, podman network and the CNI iptables chains, also after
# a failed or interrupted `make e2e-kind`.
kind-down:
	bash e2e/kind/down.sh
