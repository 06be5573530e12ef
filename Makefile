# upgradeplan — the two commands are `make demo` and `make test`; the rest are their parts.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
# One control plane per checkout by default; override to run instances side by side.
export TESTENV_DIR ?= /tmp/upgradeplan-testenv
export TESTENV_API_PORT ?= 16443
export TESTENV_ETCD_PORT ?= 12379

FUZZ_SECONDS ?= 60
CHAOS_KILLS ?= 100
CHAOS_BINDINGS ?= 2000
CHAOS_FAILOVERS ?= 6
STRESS_RUNS ?= 3
STRESS_HOGS ?= 2
# The deterministic simulation: `make sim` runs SIM_HISTORIES (10000) histories, `make test` 1000.
SIM_HISTORIES ?= 10000
SIM_BIN = $${CARGO_TARGET_DIR:-target}/debug/upgradeplan-sim
# Every cargo command of `make test` selects the whole workspace (with its tests): features are
# resolved for the packages a command selects, and `-p one` resolves a smaller set, which rebuilt
# nearly the whole dependency tree once per selection (syn, serde, tokio, k8s-openapi, kube ...).
WORKSPACE := --workspace --locked
# The integration suites: the test targets under tests/tests/.
# node.rs needs a node (make node-test).
E2E_SUITES := $(patsubst tests/tests/%.rs,--test %,$(sort $(filter-out tests/tests/node.rs,$(wildcard tests/tests/*.rs))))
# Every integration suite, whatever fails (tests/run-suites.sh), on the control plane in KUBECONFIG.
RUN_SUITES = CARGO="$(CARGO)" tests/run-suites.sh $(WORKSPACE) $(E2E_SUITES) -- --test-threads 16

.PHONY: test-k8s-oldest image node-test help sim sim-test sim-mutants test-stress build-all krew-install monitoring-rules demo-smoke chaos fuzz bench bench-scale release demo demo-stop test check unit monitoring integration cluster-install cluster-start cluster-stop crds build deps

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

deps: ## install the Debian packages the build needs (run as root on a fresh machine)
	@command -v cc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends build-essential >/dev/null; }
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt 2>/dev/null || true

build: deps ## build every binary (upgradeplan-controller, kubectl-upgradeplan, kratix-sim)
	$(CARGO) build --workspace --bins

build-all: deps ## every binary and test, with the feature set every part of `make test` shares (one build, not one per part)
	$(CARGO) build $(WORKSPACE) --tests --bins

crds: ## regenerate deploy/crds from the Rust types
	$(CARGO) run -q -p upgradeplan-controller -- crd --output-dir deploy/crds

check: deps ## formatting, lints, and the simulation's mutants still apply to the engine
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@for p in tests/mutants/*.patch; do patch --dry-run -s -p1 < $$p >/dev/null || { echo "$$p no longer applies to the engine: refresh it (make sim-mutants runs it)" >&2; exit 1; }; done

unit: deps ## tests that need no cluster (engine tables, CRD freshness, CEL rules)
	$(CARGO) test $(WORKSPACE) --no-fail-fast --lib --bins
	$(CARGO) test $(WORKSPACE) --no-fail-fast --exclude upgradeplan-e2e --test '*'
	$(CARGO) test $(WORKSPACE) --no-fail-fast --exclude upgradeplan-e2e --doc

monitoring: cluster-install ## promtool: the alert rules are valid, their unit tests pass, and they render with your settings
	promtool check rules deploy/monitoring/rules.yaml
	cd deploy/monitoring && promtool test rules rules.test.yaml
	@out=$$(mktemp -d); trap 'rm -rf '$$out EXIT; \
	RUNBOOK_BASE=https://runbooks.example.com/upgradeplan FAILED_FOR=2h BUDGET_HELD_FOR=45m scripts/monitoring-rules.sh $$out >/dev/null; \
	promtool check rules $$out/rules.yaml >/dev/null; \
	grep -q '^        keep_firing_for: 2h$$' $$out/rules.yaml; \
	grep -A5 'alert: UpgradeRunBudgetHeld$$' $$out/rules.yaml | grep -q '^        for: 45m$$'; \
	test "$$(grep -c 'runbook_url: "https://runbooks.example.com/upgradeplan#' $$out/rules.yaml)" = "$$(grep -c 'runbook_url:' deploy/monitoring/rules.yaml)"; \
	scripts/monitoring-rules.sh $$out/default >/dev/null; \
	cmp -s $$out/default/prometheusrule.yaml deploy/monitoring/prometheusrule.yaml || { echo "deploy/monitoring/prometheusrule.yaml is stale: run scripts/monitoring-rules.sh" >&2; exit 1; }; \
	echo "scripts/monitoring-rules.sh: rules render with a custom runbook base, FAILED_FOR and BUDGET_HELD_FOR"

monitoring-rules: ## write the alert rules for your installation: RUNBOOK_BASE=https://… FAILED_FOR=2h BUDGET_HELD_FOR=2h OUT=dir (see docs/runbooks.md)
	scripts/monitoring-rules.sh $(OUT)

cluster-install: ## build the test control plane: Kubernetes (tests/k8s/go.mod; TESTENV_K8S_VERSION for another release) and its etcd with the machine's Go (cached; builds once, ~6 min)
	tests/cluster.sh install

cluster-start: cluster-install ## start the test control plane (prints export lines)
	tests/cluster.sh start

cluster-stop: ## stop the test control plane started by cluster-start
	tests/cluster.sh stop

integration: build-all cluster-install ## tests against a real control plane, started and stopped here: every suite runs whatever fails; a table and 'integration: N passed, N failed' end it (log in target/integration.log)
	@trap 'tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	$(RUN_SUITES)

# The oldest Kubernetes release upgradeplan supports (README, "Supported Kubernetes versions").
K8S_OLDEST ?= v1.34.4
test-k8s-oldest: build-all ## the CRD, controller and plugin suites on the oldest supported Kubernetes release (K8S_OLDEST, v1.34.4; built once, cached), on a control plane of its own (log in target/k8s-oldest.log); not part of `make test`
	@export TESTENV_K8S_VERSION=$(K8S_OLDEST) TESTENV_DIR=/tmp/upgradeplan-k8s-oldest TESTENV_API_PORT=20443 TESTENV_ETCD_PORT=16379; \
	tests/cluster.sh install; \
	trap 'tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	kubectl version | sed 's/^/test-k8s-oldest: /'; \
	SUITES_LOG=target/k8s-oldest.log CARGO="$(CARGO)" tests/run-suites.sh $(WORKSPACE) --test crds --test controller --test plugin -- --test-threads 16

test-stress: build-all cluster-install ## the integration suites STRESS_RUNS (3) times in a row, each beside STRESS_HOGS (2) CPU-bound processes, as a busy CI machine runs them; green only if every run is (logs in target/stress-N.log)
	@hogs=(); trap 'kill $${hogs[@]} 2>/dev/null; tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	for i in $$(seq $(STRESS_HOGS)); do yes >/dev/null & hogs+=($$!); done; \
	for run in $$(seq $(STRESS_RUNS)); do \
	  echo "test-stress: run $$run of $(STRESS_RUNS), beside $(STRESS_HOGS) CPU hogs (pids $${hogs[*]})"; \
	  SUITES_QUIET=1 SUITES_LOG=target/stress-$$run.log $(RUN_SUITES) \
	    || { grep -E '^(test .* FAILED|thread .* panicked)' target/stress-$$run.log; echo "test-stress: run $$run of $(STRESS_RUNS) failed (target/stress-$$run.log)" >&2; exit 1; }; \
	done; \
	echo "test-stress: $(STRESS_RUNS) runs in a row green beside $(STRESS_HOGS) CPU hogs"

# The controller's image, built from the repository's Dockerfile into the engine DOCKER_HOST names and,
# where CONTAINERD_ADDRESS names a containerd (the test node's: `TESTENV_NODE=1 tests/cluster.sh start`
# prints both), imported into it for the kubelet (`docker save | ctr images import`). No registry is
# reachable here, so the Dockerfile's base images are replaced as its arguments allow: the static binary
# built on this machine (glibc, statically linked) and an empty runtime base. Debian's docker client
# speaks the engine's API version and has BuildKit built in.
IMAGE ?= upgradeplan-controller:dev
DOCKER ?= $(shell test -x /usr/bin/docker && echo /usr/bin/docker || echo docker)
IMAGE_BINARY = $${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/upgradeplan-controller
image: deps ## the controller's image $(IMAGE) from the Dockerfile, into DOCKER_HOST's engine and CONTAINERD_ADDRESS's containerd (its binary built here, static)
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --locked -p upgradeplan-controller --target x86_64-unknown-linux-gnu
	mkdir -p target/image && cp $(IMAGE_BINARY) target/image/upgradeplan-controller
	DOCKER_BUILDKIT=1 $(DOCKER) build -q --build-arg BINARY=prebuilt --build-arg RUNTIME_BASE=scratch -t $(IMAGE) . >/dev/null
	@if [ -n "$${CONTAINERD_ADDRESS:-}" ]; then $(DOCKER) save $(IMAGE) | ctr --namespace $${CONTAINERD_NAMESPACE:-k8s.io} images import - >/dev/null && echo "image: $(IMAGE) imported into containerd at $$CONTAINERD_ADDRESS"; fi
	@echo "image: $(IMAGE) ($$(DOCKER_HOST=$${DOCKER_HOST:-} $(DOCKER) image inspect -f '{{.Size}}' $(IMAGE) | awk '{printf "%.1f MiB", $$1/1048576}'))"

# A control plane of its own with a node (kube-scheduler, a kubelet on containerd, a private Docker Engine
# to build images in), the image built and imported into its containerd, deploy/ applied through deploy/overlays/local-node, and tests/tests/node.rs.
# Its API server port is the one the overlay gives the pods (KUBERNETES_SERVICE_PORT 16443), whatever
# TESTENV_API_PORT the caller's shell has: with another, the pods' connections are refused.
NODE_TESTENV_DIR ?= /tmp/upgradeplan-node-testenv
node-test: build-all ## the controller as pods on a real node: the image from the Dockerfile, deploy/ applied, probes, failover, a run (tests/tests/node.rs)
	TESTENV_NODE=1 tests/cluster.sh install
	export TESTENV_NODE=1 TESTENV_DIR=$(NODE_TESTENV_DIR) TESTENV_API_PORT=16443; trap 'tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	$(MAKE) --no-print-directory image; mkdir -p target; \
	$(CARGO) test $(WORKSPACE) --test node -- --nocapture 2>&1 | tee target/node-test.log | grep -E '^(test |handover|takeover|liveness)|panicked|FAILED'; \
	grep -q '^test result: ok' target/node-test.log

demo: deps cluster-install ## a local control plane, kratix-sim, the controller, a plan and a run to watch
	$(CARGO) build --workspace --locked --bins
	scripts/demo.sh start

demo-smoke: build-all ## `make demo` end to end on its own ports, then stopped (part of `make test`)
	@export DEMO_DIR=/tmp/upgradeplan-demo-smoke DEMO_API_PORT=17643 DEMO_ETCD_PORT=13579 \
	  DEMO_METRICS_PORT=18180 DEMO_HEALTH_PORT=18181 DEMO_PROMETHEUS_PORT=19190; \
	trap 'scripts/demo.sh stop >/dev/null' EXIT; \
	scripts/demo.sh start >/tmp/upgradeplan-demo-smoke.log 2>&1 || { tail -40 /tmp/upgradeplan-demo-smoke.log; exit 1; }; \
	grep -q 'Completed 30/30' /tmp/upgradeplan-demo-smoke.log || { tail -40 /tmp/upgradeplan-demo-smoke.log; echo 'the demo run did not complete' >&2; exit 1; }; \
	grep -q '^ALERT UpgradeRunFailed firing' /tmp/upgradeplan-demo-smoke.log || { tail -40 /tmp/upgradeplan-demo-smoke.log; echo 'the demo did not end with UpgradeRunFailed firing' >&2; exit 1; }; \
	if grep -q $$'\x1b\\[' /tmp/upgradeplan-demo-smoke/logs/upgradeplan-controller.log; then echo 'ANSI colour codes in the controller log file' >&2; exit 1; fi; \
	echo "make demo: run completed, 30/30; the failing run's UpgradeRunFailed alert fired"

demo-stop: ## stop everything `make demo` started
	scripts/demo.sh stop

bench: deps ## engine benchmarks (criterion), then each target against its reference measured in the same run
	$(CARGO) bench --locked -p upgradeplan --bench engine

bench-scale: deps cluster-install ## 1k bindings five times, 10k once and fifty plans of 200 at once (SIZES="1000x5 10000 plans:50x200"; NxK: K measurements of N; plans:PxB[@BUDGET][:budget-only]: P plans of B bindings started together, without and under a budget (200), or only under it; SIZES=100000 for 100k, about an hour; SIZES=plans:50x2000 for fifty plans of 100k in all) on a real control plane (release builds), against a reference orchestrator and the bare patch floor
	$(CARGO) build --release --locked --workspace --bins
	@# The API server's own watch cache reads etcd with streaming lists on Kubernetes 1.37
	@# (WatchListClient): under the bench's churn of 10,000 bindings it fell behind for good
	@# (docs/performance.md); the bench's cluster reads etcd with plain lists.
	@export TESTENV_DIR=/tmp/upgradeplan-bench TESTENV_API_PORT=18443 TESTENV_ETCD_PORT=14379 \
	  TESTENV_APISERVER_ARGS="$${TESTENV_APISERVER_ARGS---feature-gates=WatchListClient=false}"; \
	trap 'tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	target/release/scale-bench $(SIZES)

chaos: deps cluster-install ## longer reliability campaigns on a control plane of their own: CHAOS_KILLS (100) SIGKILLs in a CHAOS_BINDINGS (2000) run, CHAOS_FAILOVERS (6) leader kills, API-server restarts and faults, the bad-input corpus; log in target/chaos.log
	$(CARGO) build --workspace --locked --tests --bins
	@export TESTENV_DIR=/tmp/upgradeplan-chaos TESTENV_API_PORT=19443 TESTENV_ETCD_PORT=15379 \
	  CHAOS_KILLS=$(CHAOS_KILLS) CHAOS_BINDINGS=$(CHAOS_BINDINGS) CHAOS_FAILOVERS=$(CHAOS_FAILOVERS); \
	trap 'tests/cluster.sh stop' EXIT; \
	eval "$$(tests/cluster.sh start)"; \
	status=0; \
	$(CARGO) test $(WORKSPACE) --test reliability --test bad_input -- --test-threads 1 --nocapture >target/chaos.log 2>&1 || status=$$?; \
	grep -E '^(CHAOS_SEED|crash campaign|failover|api faults|bad input|test result|test .* (ok|FAILED)|thread .* panicked)' target/chaos.log; \
	exit $$status

fuzz: deps ## every engine fuzz target for FUZZ_SECONDS each (default 60; stable toolchain); findings in fuzz/artifacts
	$(CARGO) build --profile fuzz --locked -p upgradeplan-fuzz
	target/fuzz/upgradeplan-fuzz --seconds $(FUZZ_SECONDS) --artifacts fuzz/artifacts

krew-install: build-all cluster-install ## the release archive (debug build) installed exactly as krew installs it, then run through kubectl
	PROFILE=dev CARGO_SELECTION="$(WORKSPACE) --tests --bins" scripts/release.sh >/dev/null
	PATH="$$(tests/cluster.sh bin):$$PATH" $(CARGO) test $(WORKSPACE) --test krew -- --ignored

release: ## the plugin's release archive for this machine (dist/), its sha256, written into krew/upgradeplan.yaml
	scripts/release.sh $(TARGET)

sim: build-all ## the deterministic simulation (spec §14.3): SIM_HISTORIES (10000) histories from SIM_SEED (default: the clock); a violation prints its seed and shortest history
	SIM_HISTORIES=$(SIM_HISTORIES) $(SIM_BIN)

sim-mutants: deps ## shows the simulation catches bugs: each deliberate engine bug of tests/mutants/ applied to a scratch copy, the simulation run on it; 'mutants: N of M caught'
	scripts/sim-mutants.sh

sim-test: build-all ## the simulation as `make test` runs it: 1000 histories
	SIM_HISTORIES=1000 $(SIM_BIN)

test: check unit sim-test monitoring krew-install integration demo-smoke node-test ## everything: format, lints, unit, rule and integration tests, the demo, and the controller as pods on a node
