#!/usr/bin/env bash
# make test-minor MINOR=1.35: every test of make test, built for that
# Kubernetes minor of hack/k8s-minors.txt (its go.mod and build tag,
# hack/lib.sh) and run against its kube-apiserver, kube-controller-manager,
# kubectl and kubelet (hack/build-tools.sh with MINOR, cached in
# bin/minors/MINOR/), with Headroom's binaries and images built for it
# (hack/build.sh with MINOR) and everything minor-independent from bin/
# (run make tools first). go vet of the minor's build comes first.
#   TESTS  a go test -run pattern for every package run (default: all)
#   PKGS   the packages to test instead of make test's (then without -race)
# test/cilium and test/awsipamd are modules of their own, built on the
# default minor's client; they run against the minor's control plane.
set -euo pipefail
[[ -n ${MINOR:-} ]] || { echo "usage: make test-minor MINOR=<minor of hack/k8s-minors.txt> [TESTS=regexp] [PKGS=packages]" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"

hack/build-tools.sh
hack/build.sh images
"$MINOR_BIN_DIR/kube-apiserver" --version

export HEADROOM_BIN_DIR=$MINOR_BIN_DIR
flags=("${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" -count=1 -timeout 60m ${TESTS:+-run "$TESTS"})
go vet "${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" ./...
if [[ -n ${PKGS:-} ]]; then
  # shellcheck disable=SC2086 # PKGS is a list of patterns
  go test "${flags[@]}" $PKGS
  exit
fi
go test "${flags[@]}" -race ./pkg/... ./plugins/...
go test "${flags[@]}" $(go list "${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" ./... | grep -v -e /pkg/ -e /plugins/)
for dir in test/cilium test/awsipamd; do
  (cd "$dir" && go test -count=1 -timeout 60m ${TESTS:+-run "$TESTS"} ./...)
done
