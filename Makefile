# Ayatori — developer entry points. `make help` lists them.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

include integration/tools/versions.env

TOOLS_CACHE ?= $(or $(AYATORI_TOOLS_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ayatori/tools)
export AYATORI_TOOLS_CACHE := $(TOOLS_CACHE)
CONTROLLER_GEN := $(TOOLS_CACHE)/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
GOLANGCI_LINT := $(TOOLS_CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
GO_TEST_FLAGS ?=

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

##@ Build tools and servers

.PHONY: postgres
postgres: ## Check for the PostgreSQL 15 server binaries; install Debian's postgresql-15 when missing (root or passwordless sudo).
	@integration/tools/ensure-postgres.sh

.PHONY: tools
tools: ## Build every pinned tool and test server that is missing from the cache.
	@integration/tools/build.sh

$(CONTROLLER_GEN):
	@integration/tools/build.sh controller-gen

$(GOLANGCI_LINT):
	@integration/tools/build.sh golangci-lint

##@ Container images

# The images `make images` builds, as the testcontainers provider's overrides.
LOCAL_IMAGES_ENV := AYATORI_TC_POSTGRES_IMAGE=ayatori-test/postgres:15 AYATORI_TC_OPENBAO_IMAGE=ayatori-test/openbao:$(VAULT_VERSION:v%=%)

.PHONY: images
images: ## Build the container images without a registry: the testcontainers provider's (Debian base by debootstrap, PostgreSQL 15, OpenBao-compatible server, nats-server), a Go toolchain image and the product image ayatori-manager:latest; installs and starts Docker when missing (root or passwordless sudo); cached.
	@integration/images/build.sh

##@ Code generation

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs (deploy/crd) and RBAC (deploy/rbac).
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=deploy/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=ayatori-manager paths="./projectors/...;./executors/...;./cmd/..." output:rbac:artifacts:config=deploy/rbac

.PHONY: verify
verify: generate manifests lint ## Regenerate everything and fail on any diff.
	@if ! git diff --quiet -- api deploy || [[ -n "$$(git ls-files --others --exclude-standard -- api deploy)" ]]; then \
		echo "generated files are out of date; run 'make generate manifests' and commit:"; \
		git diff --stat -- api deploy; git ls-files --others --exclude-standard -- api deploy; exit 1; fi
	@echo "verify: generated files are up to date"

##@ Quality

.PHONY: lint
lint: $(GOLANGCI_LINT) ## gofmt check, go vet and golangci-lint (.golangci.yml: staticcheck, unused, importas, errorlint, ineffassign).
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(GOLANGCI_LINT) run ./...

.PHONY: build
build: ## Build the binaries into bin/ (ayatori-manager, ayatori-journal, kubectl-ayatori, ayatori-bootstrap).
	go build -o bin/ ./cmd/...

VERSION ?= v0.1.0
.PHONY: plugin-archives
plugin-archives: ## The kubectl ayatori plugin's release archives (bin/kubectl-ayatori_<os>_<arch>.tar.gz) and their sha256 for plugins/ayatori.yaml.
	@for p in linux/amd64 linux/arm64 darwin/arm64; do \
		os=$${p%/*}; arch=$${p#*/}; d=bin/plugin-$$os-$$arch; mkdir -p $$d; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -o $$d/kubectl-ayatori ./cmd/kubectl-ayatori && \
		tar -C $$d -czf bin/kubectl-ayatori_$${os}_$${arch}.tar.gz kubectl-ayatori && \
		sha256sum bin/kubectl-ayatori_$${os}_$${arch}.tar.gz; \
	done

##@ Tests

.PHONY: test-unit
test-unit: ## Fast loop: unit tests only (no servers; test files that only run on real servers carry //go:build !unit).
	go test $(GO_TEST_FLAGS) -short -tags unit ./...

# Under AYATORI_TEST_PROVIDER=testcontainers the servers are containers of
# the images `make images` builds (and the product image's smoke test runs).
TEST_PREREQS := postgres tools $(if $(filter testcontainers,$(AYATORI_TEST_PROVIDER)),images)

.PHONY: test
# The harness's temporary directories (servers' data, keys, certificates,
# envtest's etcd and certificates) are removed by their owners, a killed
# child test binary's with its parent test's TMPDIR. GO_TEST_TMP gives
# `go test` a TMPDIR of its own (under the caller's; the port locks stay in
# the caller's, shared with every other test process on the machine) and
# removes it at the end whatever happened; CHECK_LEFTOVERS fails the run
# when the tests left one of the harness's directories there.
GO_TEST_TMP = gotmp="$$(mktemp -d "$${TMPDIR:-/tmp}/ayatori-go-test-XXXXXX")"; chmod 0755 "$$gotmp"; \
	trap 'rm -rf "$$gotmp"' EXIT; \
	export AYATORI_PORT_LOCK_DIR="$${AYATORI_PORT_LOCK_DIR:-$${TMPDIR:-/tmp}/ayatori-ports}"
CHECK_LEFTOVERS = left="$$(find "$$gotmp" -mindepth 1 -maxdepth 1 -type d \( -name 'ayatori-*' -o -name 'envtest-*' -o -name 'k8s_test_framework_*' \) -printf '%f\n' | sort)"; \
	if [[ -n "$$left" ]]; then echo "$@: the tests left these directories behind (removed now):" $$left; exit 1; fi

test: $(TEST_PREREQS) ## Unit + envtest + integration + stack tests on real servers (local processes; AYATORI_TEST_PROVIDER=testcontainers: containers, images built first); fails if a test leaves a temporary directory behind.
	@$(GO_TEST_TMP); rc=0; \
	TMPDIR="$$gotmp" go test $(GO_TEST_FLAGS) -count=1 -timeout 25m ./... || rc=$$?; \
	$(CHECK_LEFTOVERS); exit $$rc

.PHONY: test-containers
test-containers: images tools postgres ## Every suite again under AYATORI_TEST_PROVIDER=testcontainers (PostgreSQL, OpenBao, JetStream in containers of the `make images` images; the product image as manager in a smoke test; reaper off); fails if a test leaves a container or a temporary directory behind.
	@before="$$(docker ps -aq --filter label=org.testcontainers=true | sort)"; $(GO_TEST_TMP); rc=0; start=$$SECONDS; \
	TMPDIR="$$gotmp" AYATORI_TEST_PROVIDER=testcontainers TESTCONTAINERS_RYUK_DISABLED=true $(LOCAL_IMAGES_ENV) \
		go test $(GO_TEST_FLAGS) -count=1 -timeout 25m ./... || rc=$$?; \
	echo "test-containers: go test took $$((SECONDS - start))s"; \
	after="$$(docker ps -aq --filter label=org.testcontainers=true)" || { echo "test-containers: docker ps failed; cannot check for containers left behind"; exit 1; }; \
	left="$$(comm -13 <(echo "$$before") <(echo "$$after" | sort))"; \
	if [[ -n "$$left" ]]; then \
		echo "test-containers: the tests left these containers behind (remove them with: docker rm -f -v $$(echo $$left)):"; \
		docker ps -a --filter label=org.testcontainers=true | grep -E "$$(echo $$left | tr ' ' '|')"; exit 1; fi; \
	echo "test-containers: no container left behind"; $(CHECK_LEFTOVERS); exit $$rc

##@ End to end

# The images make e2e loads into its node (integration/images/build.sh names).
E2E_IMAGES := debian postgres openbao nats manager eso coredns pause

.PHONY: e2e
e2e: ## Real cluster end to end (root): a node of kubelet, containerd 2, runc, bridge CNI, kube-proxy and CoreDNS; the make images images loaded into it; Ayatori installed with kubectl apply -k deploy/overlays/e2e (two replicas, leader election) beside PostgreSQL 15 TLS, OpenBao and ESO pods; Tenants used by application pods, Jobs running real containers (docs/testing.md "End to end").
	@integration/tools/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler vault external-secrets nats-server e2e
	@integration/images/build.sh $(E2E_IMAGES)
	go test -tags e2e -count=1 -v -timeout 30m ./integration/e2e/

##@ Benchmarks

.PHONY: bench-journal
bench-journal: ## Journal benchmarks on an embedded JetStream and on a three-node cluster with stream replicas 3 (sync_interval always); figures go to docs/journal.md (one Job's timeline in a 1,000,000-record execution stream: docs/execution/operations.md "Scale").
	go test -run '^$$' -bench 'Append|Read|Fold' -benchtime 3000x ./journal/
	AYATORI_BENCH_RECORDS=$${AYATORI_BENCH_RECORDS:-1000000} go test -run '^$$' -bench 'TimelineLargeStream' -benchtime 200x -timeout 60m ./journal/

##@ Run

.PHONY: demo
demo: postgres tools ## Run the product on real servers, print what a user sees, tear down (see README).
	@go build -o bin/ayatori-demo ./integration/demo
	@bin/ayatori-demo

.PHONY: dev
dev: postgres tools ## Like demo, but keep the stack up and print how to explore it; Ctrl-C stops everything.
	@go build -o bin/ayatori-demo ./integration/demo
	@bin/ayatori-demo -keep

.PHONY: bench
bench: postgres tools ## Scale benchmark: N=100 Tenants on one Instance with its critical-path breakdown, timeline picture and a CPU profile of the kube-apiserver, one Tenant at a time on an idle stack (p50 of 20), N=1000 Tenants (then idling through three re-check intervals), N=100 with a leader hand-over (SIGTERM, SIGKILL) mid-run, N=100 on a three-node JetStream cluster (figures in docs/journal.md); then 100 Ayatori Jobs against 100 plain batch/v1 Jobs, with kube-controller-manager's default API rate limit and with 500 QPS, and 1,000 Ayatori Jobs with ttlSecondsAfterFinished 0 (throughput to the last TTL deletion, TTL deletion lag, journal records per Job, manager memory, one native Job and one TTLExpired per Job), also with a manager SIGKILL mid-run; and 100 Jobs on an OpenSandbox class through the spec-validating OpenSandbox test server, then deleted (times, OpenSandbox requests per Job by route, one sandbox and one command per Job, no spec violation; figures in docs/execution/operations.md "Scale"). With PLAIN_OPERATOR=<binary> PLAIN_OPERATOR_CRDS=<dir> (movetokube/postgres-operator built outside this repository, docs/testing.md "Side by side with a plain operator"): 5 interleaved rounds of 100 databases with a user through it and 100 Tenants.
	go run ./integration/bench -n 100 -profile-apiserver 20s
	go run ./integration/bench -n 1 -repeat 20
	go run ./integration/bench -n 1000 -resync 2m -idle 6m10s
	go run ./integration/bench -n 100 -handover term
	go run ./integration/bench -n 100 -handover kill
	go run ./integration/bench -n 100 -nats-cluster
	go run ./integration/bench -jobs 100
	go run ./integration/bench -jobs 100 -kcm-qps 500
	go run ./integration/bench -jobs 1000 -ttl 0 -kcm-qps 500 -profile-manager 60s -profile-apiserver 60s
	go run ./integration/bench -jobs 1000 -ttl 0 -kcm-qps 500 -restart
	go run ./integration/bench -opensandbox-jobs 100
	$(if $(PLAIN_OPERATOR),go run ./integration/bench -n 100 -plain-operator $(PLAIN_OPERATOR) -plain-operator-crds $(PLAIN_OPERATOR_CRDS) -rounds 5)
