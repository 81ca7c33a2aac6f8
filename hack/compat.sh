#!/usr/bin/env bash
# make compat: a smoke subset of the integration tests against the next
# Kubernetes minor's kube-apiserver (hack/tools/compat/go.mod, built from
# the Go module proxy into bin/compat-<minor>/), with every other binary
# (etcd, kube-controller-manager, kubectl, kwok, Headroom's) from bin/.
# Not part of make test: kube-apiserver of another release builds cold in
# far more than the few minutes a test run may add (docs/compatibility.md
# records the cost and the last result).
#   COMPAT_TESTS  the tests to run (a go test -run pattern)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
COMPAT_TESTS=${COMPAT_TESTS:-'^(TestKubectlHeadroomAgreesWithScheduler|TestKubectlHeadroomReadsTheClusterConfiguration|TestManifestsApply|TestShippedRights|TestNodePIDsKeepsPodsOffShortNodes|TestRelieveNodePressureEvictsInDeleteOrder)$'}

cd "$HEADROOM_ROOT/hack/tools/compat"
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${version#v}; minor=v${minor%.*}
dir=$BIN_DIR/compat-$minor
mkdir -p "$dir"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
if [[ ! -x $dir/kube-apiserver || "$(cat "$dir/.kube-apiserver.stamp" 2>/dev/null)" != "$stamp" ]]; then
  echo ">> building kube-apiserver $version (cold: tens of minutes on 2 cores)"
  start=$SECONDS
  go build -trimpath -ldflags "$(k8s_ldflags "$version")" -o "$dir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  echo "$stamp" >"$dir/.kube-apiserver.stamp"
  echo ">> built in $((SECONDS - start)) s"
fi
# Everything else from bin/: etcd, kube-controller-manager (one minor
# behind the API server, a supported skew), kubectl, kwok and its stages,
# Headroom's binaries.
for f in "$BIN_DIR"/*; do
  name=$(basename "$f")
  [[ $name == kube-apiserver || $name == compat-* || -d $f && $name != images ]] && continue
  ln -sfn "$f" "$dir/$name"
done
"$dir/kube-apiserver" --version
cd "$HEADROOM_ROOT"
HEADROOM_BIN_DIR=$dir go test -count=1 -timeout 30m -v ./test/integration -run "$COMPAT_TESTS" 2>&1 |
  tee "$dir/last-run.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok )'
