# handlerkit: run `make` (or `make help`) for the list of targets.

GO        ?= go
# The main module's packages `make test` runs (default: all). Both lanes take
# theirs from this list: PKGS=./pkg/operator runs that package alone,
# PKGS=./pkg/testenv/... the node lane's share of that tree. The test-only
# modules (MODULES) run only with the default ./....
PKGS      ?= ./...
# -race where it fits: every package runs under the race detector.
# -trimpath keeps the checkout's path out of what the compiler produces, so
# that a fresh clone elsewhere (CI's) reuses the build cache of an earlier one
# instead of compiling every package of the repository again.
# -ldflags=-w: without DWARF (which only a debugger reads; stack traces and
# the race detector's reports use the symbol table) a link takes about a
# fifth less. Test binaries are kept between runs (hack/test-lanes.sh,
# TESTBIN), so only those whose code changed are linked again.
TESTFLAGS ?= -race -trimpath -ldflags=-w -count=1 -timeout 40m
# The modules of their own that `make test` also tests (in the second lane).
MODULES   ?= $(if $(filter ./...,$(PKGS)),test/monitoring test/helm bench)
# The packages whose tests start a cluster-mode node (testenv.WithNode or
# WithServiceProxy). They take turns on the machine-wide node lock, so `make
# test` runs them in a lane of their own (the node lane) beside every other
# package (the rest lane): the first alone, then the others at once, so that
# one builds its images while another holds the node (hack/test-lanes.sh).
# test/e2e comes last: it runs the Prometheus server, which builds
# (test-late) while the first node packages run.
# TestNodePackagesAreListed (hack/lanes_test.go) fails when this list is not
# exactly the packages whose tests start a node.
NODE_PKGS := ./pkg/testenv ./pkg/testenv/clustertest ./examples/memcached-operator/e2e ./test/e2e
# The rest lane's longest packages, which it starts first so that it ends on
# short ones (from warm runs: internal/release 130 s, pkg/operator 146 s, pkg/inject/atstart 108 s,
# pkg/jvm 89 s, jvmtest 82 s, test/deploy 79 s, jmx-attach 70 s, then 25 to
# 50 s each; hack/lanes_test.go checks that they exist and start no node).
LONG_PKGS := ./internal/release ./pkg/operator ./pkg/inject/atstart ./hack ./pkg/jvm/jvmtest ./pkg/jvm ./cmd/jmx-attach ./pkg/sdk ./test/deploy \
	./pkg/testenv/outsidemodule ./pkg/leader ./pkg/images/testimages ./hack/demo
# How many packages the rest lane builds and runs at once (go test -p): with
# 2, the next package's test binary builds (when its code changed) while one
# runs.
REST_P    ?= 2
BIN       ?= bin
# Flags for hack/demo, e.g. DEMOFLAGS=-exit to stop after the metrics are printed.
DEMOFLAGS ?=
# Flags for the side-by-side benchmark (bench/), e.g. BENCHFLAGS='-runs 1 -objects 2000'.
BENCHFLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The demo is built, then run by make itself, with no `go run` in between:
# Ctrl-C reaches the demo, which stops, cleans up and exits 0, so make prints
# no error. (GNU make, interrupted itself, then ends by SIGINT as a shell
# expects: exit status 130, and no message.)
.PHONY: demo
demo: prereqs controlplane node prometheus images ## The main job: a local cluster, the operator, a JVM, its metrics without a restart (Ctrl-C stops it).
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/demo ./hack/demo
	$(BIN)/demo $(DEMOFLAGS)

# The one version of a release (the VERSION file; internal/buildinfo's
# TestOneVersion keeps the chart, the manifests, the image and the agent
# equal to it), and the commit and its date, which the binaries report
# (--version, their start's log line, handlerkit_operator_build_info),
# stamped with -ldflags. The date is the commit's, so that a build of one
# commit is the same binary whenever it is made.
VERSION ?= v$(shell cat VERSION)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
BUILDINFO := github.com/handlerkit/handlerkit/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(DATE)

.PHONY: build
build: ## Build every command into ./bin (static, CGO_ENABLED=0).
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

.PHONY: prereqs
prereqs: ## Install missing Debian packages (JDK, Maven, runc, CNI plugins, debootstrap, iproute2, iptables) with apt-get.
	hack/prereqs.sh

.PHONY: controlplane
controlplane: ## Build kube-apiserver and etcd into the cache (skips what is cached).
	hack/build-controlplane.sh

.PHONY: node
node: ## Build kubelet, kube-controller-manager, kube-scheduler, kube-proxy and containerd into the cache.
	hack/build-node.sh

.PHONY: prometheus
prometheus: ## Build the Prometheus server the e2e tests and the demo run (hack/prometheus) into the cache.
	$(GO) run ./cmd/testenv-build prometheus

.PHONY: agent
agent: prereqs ## Build the project's JMX exporter java agent (agent/, Maven; cached by the sha256 of its sources) and print the jar's path on the last line.
	@$(GO) run ./hack/agent

.PHONY: images
images: prereqs agent ## Build the test and demo images (pause, echo, jmx agent, JVM, shell-less JVM, memcached) without Docker.
	$(GO) run ./hack/images

# The image `make image` builds and tags (the manifests' and the CRD's default agent image).
IMAGE  ?= ghcr.io/handlerkit/jmx-agent:$(VERSION)
DOCKER ?= docker

.PHONY: image
image: ## Build the operator and agent image from the Dockerfile (needs a Docker engine; `make release` is the no-Docker way).
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make image: no Docker engine answers '$(DOCKER) info'; start one, or build the release image without Docker: make release" >&2; exit 1; }
	$(DOCKER) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg DATE=$(DATE) -t $(IMAGE) .

# The release (docs/release.md), built without Docker by hack/release
# (internal/release) into DIST: the agent image for PLATFORMS as an OCI
# image index (an OCI layout tarball), its SPDX SBOM, the packaged chart,
# the single-file install manifests and SHA256SUMS. The image, the chart's
# default image and the manifests name REGISTRY, so `make push` must be
# given the same REGISTRY (it rebuilds with it first). Needs Go, git and
# Maven with a JDK (the agent jar, cached as `make agent` caches it).
REGISTRY  ?= ghcr.io/handlerkit
PLATFORMS ?= linux/amd64,linux/arm64
DIST      ?= dist

.PHONY: release
release: ## Build the release into dist/ without Docker: multi-arch image (OCI layout), SBOM, chart .tgz, install manifests, SHA256SUMS (REGISTRY, PLATFORMS).
	$(GO) run ./hack/release build -out '$(DIST)' -registry '$(REGISTRY)' -platforms '$(PLATFORMS)' -commit '$(COMMIT)' -date '$(DATE)'

.PHONY: push
push: release ## Build the release for REGISTRY, then push its image index and its chart (OCI) there: make push REGISTRY=... (credentials: docker login).
	$(GO) run ./hack/release push -out '$(DIST)' -registry '$(REGISTRY)'

.PHONY: test
test: ## Unit, integration and cluster-mode tests against a real cluster, and the benchmark's smoke test (two lanes: hack/test-lanes.sh).
	@$(MAKE) --no-print-directory -j 4 test-prereqs
	@GO='$(GO)' MAKE='$(MAKE)' TESTFLAGS='$(TESTFLAGS)' PKGS='$(PKGS)' MODULES='$(MODULES)' \
		NODE_PKGS='$(NODE_PKGS)' LONG_PKGS='$(LONG_PKGS)' REST_P='$(REST_P)' hack/test-lanes.sh

# What `make test` needs before its lanes start, in two chains that make -j
# runs side by side: the network-bound one (Debian packages, then Maven's
# agent, then the images' Debian root filesystems; the Go modules) beside the
# CPU-bound one (the kube binaries and containerd, then the main module's
# packages compiled as the tests compile them). What only the last node
# package and a few others need builds beside the lanes (test-late).
.PHONY: test-prereqs
test-prereqs: prereqs agent images test-downloads test-binaries test-compile

# cmd/testenv-build, compiled once for the steps below that run it (two go
# run at once would both compile its dependencies, client-go and more, on a
# cold cache).
.PHONY: test-testenv-build
test-testenv-build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/testenv-build ./cmd/testenv-build

# `make controlplane node` in one command: one go build for all the kube
# binaries (a shared compile, the links side by side), then containerd.
.PHONY: test-binaries
test-binaries: test-testenv-build
	$(BIN)/testenv-build -node

# The Go modules of the main module and the test-only modules, and those of
# containerd and Prometheus (built after the kube binaries, which download
# their own as they build), downloaded while the kube binaries build.
.PHONY: test-downloads
test-downloads: test-mod-downloads test-binary-downloads

.PHONY: test-mod-downloads
test-mod-downloads:
	$(GO) mod download
	for m in $(sort $(MODULES) test/monitoring test/helm); do (cd $$m && $(GO) mod download) || exit 1; done

.PHONY: test-binary-downloads
test-binary-downloads: test-testenv-build
	$(BIN)/testenv-build -download containerd containerd-shim-runc-v2 ctr prometheus

# The packages the tests of PKGS import (not the tests themselves, nor main
# packages, whose links would be thrown away) compiled with the tests' build
# flag -race, so that the two lanes, which start at once, do not both compile
# the same dependencies. After test-binaries: one CPU-bound build at a time.
TEST_DEPS = $(GO) list -deps -test -f '{{if and (ne .Name "main") (not .ForTest) (not .Standard) .GoFiles}}{{.ImportPath}}{{end}}' $(PKGS)
.PHONY: test-compile
test-compile: test-binaries
	@pkgs=$$($(TEST_DEPS)) && echo "$(GO) build $(filter -race -trimpath,$(TESTFLAGS)) (the $$(echo "$$pkgs" | wc -l) packages that the tests of $(PKGS) import)" && \
		$(GO) build $(filter -race -trimpath,$(TESTFLAGS)) $$pkgs

# What hack/test-lanes.sh builds beside the lanes: the Prometheus server
# (pkg/testenv/prometheus, test/e2e); a test that comes first waits for the
# build (testenv's build lock). The commands of test/monitoring and test/helm
# (modules of their own) are built by the tests that run them (test/e2e,
# test/deploy), with the tests' -race, so that those modules' own race tests
# at the end of the rest lane reuse the compiled packages: built here too,
# at the same time as the tests built them, each graph was compiled twice or
# three times on a cold machine.
.PHONY: test-late
test-late: test-testenv-build
	$(BIN)/testenv-build prometheus

.PHONY: bench
bench: bench-packages bench-table ## Run every benchmark: the packages' Go benchmarks, then the side-by-side table.

.PHONY: bench-packages
bench-packages: controlplane ## The packages' Go benchmarks (go test -bench).
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 60m $(PKGS)

.PHONY: bench-table
bench-table: controlplane ## handlerkit vs controller-runtime vs a client-go loop vs a raw watch: a markdown table (docs/performance.md).
	@mkdir -p $(BIN)
	cd bench && $(GO) run . -json ../$(BIN)/bench-results.json -benchfmt ../$(BIN)/bench.txt $(BENCHFLAGS)

# Flags for the operator's scale benchmark (bench/cmd/operator-scale), e.g.
# OPSCALEFLAGS='-pods 2000 -shapes one -steady 30s'.
OPSCALEFLAGS ?=

.PHONY: bench-operator
bench-operator: controlplane ## The operator at scale: its binary, 10,000 pods and a simulated kubelet on a real API server, two shapes: a markdown table (docs/performance.md).
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/prometheus-jmx-exporter-operator
	cd bench && $(GO) run ./cmd/operator-scale -operator ../$(BIN)/prometheus-jmx-exporter-operator -json ../$(BIN)/operator-scale.json $(OPSCALEFLAGS)

.PHONY: codegen
codegen: ## Regenerate clientsets, listers, informers, deepcopy and CRD manifests.
	hack/update-codegen.sh

# The chart's copies of files it cannot read from outside its directory.
CHART ?= charts/prometheus-jmx-exporter-operator

.PHONY: chart
chart: ## Write the Helm chart's README.md (hack/chartdoc, from values.yaml's comments) and its copy of the dashboard.
	cp deploy/grafana/prometheus-jmx-exporter.json $(CHART)/files/dashboards/
	$(GO) run ./hack/chartdoc $(CHART)

.PHONY: verify
verify: ## gofmt, go vet, go mod tidy, codegen freshness and the chart's README.md and copies.
	hack/verify.sh

.PHONY: clean
clean: ## Remove build output and test caches (not the cached control plane).
	rm -rf $(BIN)
	$(GO) clean -testcache
