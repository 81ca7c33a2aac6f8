# Headroom. `make run` brings up the demo, `make test` runs every test.
SHELL := /bin/bash
NODES ?= 10
GO_TEST_FLAGS ?= -count=1 -timeout 60m

.PHONY: all build tools test unit integration bench fuzz run down verify generate clean

all: build

build: ## headroom-scheduler, headroom-descheduler, headroom-node-agent into bin/
	hack/build.sh

tools: ## etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, code generators into bin/
	hack/build-tools.sh

# The models and plugins run concurrently in the scheduler (Score runs in
# parallel over nodes), so their tests run under the race detector.
RACE_PKGS := ./pkg/... ./plugins/...

test: tools build ## every unit and integration test (the CI command)
	go test $(GO_TEST_FLAGS) -race $(RACE_PKGS)
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /pkg/ -e /plugins/)

unit: ## unit tests only
	go test $(GO_TEST_FLAGS) -race $(RACE_PKGS)
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /pkg/ -e /plugins/ -e /test/)

integration: tools build ## integration tests against a real control plane
	go test $(GO_TEST_FLAGS) -v ./test/...

bench: ## micro-benchmarks (allocations reported) with ratios to in-run baselines
	hack/bench.sh

FUZZTIME ?= 30s
fuzz: ## every fuzz test, FUZZTIME each
	@for pkg in $$(go list ./pkg/... ./plugins/...); do \
	  for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo ">> $$pkg $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

run: ## demo: local control plane, NODES kwok nodes, headroom-scheduler, a Deployment
	NODES=$(NODES) hack/local-up.sh

down: ## stop the demo cluster
	hack/local-down.sh

verify: tools ## gofmt, vet, go mod tidy, generated code up to date
	hack/verify.sh

generate: tools ## deepcopy, conversion and defaulting code; the Helm chart's files from manifests/
	hack/update-codegen.sh
	hack/update-chart.sh

clean:
	rm -rf bin .local
