# Headroom. `make run` brings up the demo, `make test` runs every test.
SHELL := /bin/bash
NODES ?= 10
GO_TEST_FLAGS ?= -count=1 -timeout 60m

.PHONY: all build images tools release push test unit integration test-minor test-kubectl-minors bench perf bench-agent e2e-bench fuzz run down verify generate clean

all: build

build: ## Headroom's binaries and kubectl-headroom into bin/
	hack/build.sh

images: ## the binaries, then their OCI image tarballs in bin/images/ (no container engine)
	hack/build.sh images

release: ## a release in bin/release/: multi-arch OCI images with SBOMs for every minor of hack/k8s-minors.txt (images/<minor>/), the packaged chart, kubectl-headroom's krew archives and manifest, all signed with SLSA provenance (cosign.pub), SHA256SUMS (docs/release.md)
	hack/release.sh

push: ## make push REGISTRY=HOST[:PORT]/PATH: the images of bin/release/ (by digest and tag, with their SBOMs, signatures and provenance) and the chart (OCI) to REGISTRY
	REGISTRY=$(REGISTRY) hack/push.sh

tools: ## etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, code generators, helm, promtool; a real node's kubelet, containerd, runc, CNI plugins and pause image into bin/ (the default minor's; make test-minor builds another's)
	MINOR= hack/build-tools.sh

# The models and plugins run concurrently in the scheduler (Score runs in
# parallel over nodes), so their tests run under the race detector.
RACE_PKGS := ./pkg/... ./plugins/...

test: tools images ## every unit and integration test (the CI command)
	go test $(GO_TEST_FLAGS) -race $(RACE_PKGS)
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /pkg/ -e /plugins/)
	cd test/cilium && go test $(GO_TEST_FLAGS) ./...
	cd test/awsipamd && go test $(GO_TEST_FLAGS) ./...
	cd hack/tools/release && go test $(GO_TEST_FLAGS) ./...
	cd hack/tools/mdcheck && go test $(GO_TEST_FLAGS) ./...
	go test $(GO_TEST_FLAGS) -tags e2ebench -skip '^TestE2EBench$$' ./test/e2ebench

unit: tools ## unit tests only (the CNI IPAM tests run bin/host-local; the image tests need make images: they run in make test)
	go test $(GO_TEST_FLAGS) -race $(RACE_PKGS)
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /pkg/ -e /plugins/ -e /test/ -e /hack/images)

integration: tools build ## integration tests against a real control plane (test/cilium, test/awsipamd: modules of their own, Cilium's CRD and types, the AWS VPC CNI's ipamd datastore)
	go test $(GO_TEST_FLAGS) -v ./test/...
	cd test/cilium && go test $(GO_TEST_FLAGS) -v ./...
	cd test/awsipamd && go test $(GO_TEST_FLAGS) -v ./...

test-minor: tools ## make test-minor MINOR=1.35 [TESTS=regexp] [PKGS=packages]: make test's tests built for that Kubernetes minor of hack/k8s-minors.txt, against its control plane and kubelet (bin/minors/MINOR/); not in make test: docs/compatibility.md
	MINOR="$(MINOR)" hack/test-minor.sh

test-kubectl-minors: tools ## make test-kubectl-minors [MINORS="1.35 1.36"] [TESTS=regexp]: kubectl-headroom's integration tests with the one released build (the default minor's) against every shipped minor's control plane and that minor's scheduler; not in make test: docs/compatibility.md
	MINORS="$(MINORS)" TESTS="$(TESTS)" hack/test-kubectl-minors.sh

bench: ## micro-benchmarks (allocations reported) with ratios to in-run baselines
	hack/bench.sh

e2e-bench: tools images ## the same PID storm, slow leak, memory hog and pod-IP exhaustion on two real nodes, the default stack (A), it with the kubelet tuned to Headroom's lines (A′; not for pod IPs) and Headroom (B), each run on fresh nodes, RUNS times each (default 3; about 180 min), PARTS=storm,slowleak,podips,memory (default all) measures those parts and keeps the other parts' sections: docs/e2e-bench.md
	go test -tags e2ebench -count=1 -timeout 300m -v ./test/e2ebench -args -table $(CURDIR)/docs/e2e-bench.md $(if $(RUNS),-runs $(RUNS)) $(if $(PARTS),-parts $(PARTS))

perf: ## scheduler_perf: the Headroom profile's scheduling cycle against the default profile's, in one scheduler (needs bin/etcd); MINOR=1.35 runs that minor's scheduler and harness
	hack/perf.sh

bench-agent: ## the node agent's writes at 5,000 and 15,000 nodes, and the Calico block watches and the descheduler's Event informer at 5,000, against a real kube-apiserver, beside the kubelets' own (needs bin/etcd, bin/kube-apiserver, bin/kubectl)
	hack/bench-agent.sh

# A count of executions (Nx), not a duration: a duration races the fuzz
# coordinator's own deadline and fails with a bare "context deadline exceeded"
# when a worker is mid-call at the end (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME ?= 500000x
# Targets are found in the sources (func FuzzX in a _test.go file), so that
# no test binary is linked just to list them.
FUZZ_DIRS ?= apis pkg plugins
fuzz: ## every fuzz test under FUZZ_DIRS (annotation parsers, args decoders, models), FUZZTIME (executions) each
	@for f in $$(grep -l '^func Fuzz' $$(find $(FUZZ_DIRS) -name '*_test.go' | sort)); do \
	  pkg=./$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo ">> $$pkg $$t"; go test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

run: ## demo: local control plane, NODES kwok nodes and two real nodes, headroom-scheduler and -descheduler, a Deployment, one node relieved, a real node's storm moved to the other
	NODES=$(NODES) hack/local-up.sh

down: ## stop the demo cluster
	hack/local-down.sh

verify: tools ## gofmt, vet, go mod tidy, generated code up to date, Markdown that parses with closed fences and links that resolve, the GitHub workflows (actionlint)
	hack/verify.sh

generate: tools ## deepcopy, conversion and defaulting code; the Helm chart's files from manifests/
	hack/update-codegen.sh
	hack/update-chart.sh

clean:
	rm -rf bin .local
