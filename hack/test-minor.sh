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
flags=("${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" -count=1 -timeout 60m -v ${TESTS:+-run "$TESTS"})
go vet "${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" ./...
# Every test's result goes to $log (go test -v) and, summed up at the end,
# one line per top-level test to $results and as a Markdown table beside
# it: what docs/results/MINOR.md records per minor.
log=$MINOR_BIN_DIR/test-minor.log results=$MINOR_BIN_DIR/test-minor-results.txt
: >"$log"
summarize() {
  awk '/^--- (PASS|FAIL|SKIP): / { sub(/:$/, "", $2); gsub(/[()]/, "", $4); t[++n] = $3 " " $2 " " $4 }
    /^(ok|FAIL)[ \t]+[a-z0-9.-]+\// { for (i = 1; i <= n; i++) print $2, t[i]; n = 0 }' "$log" >"$results"
  # The same as a Markdown table, the body of docs/results/MINOR.md.
  {
    echo "| package | test | result | seconds |"
    echo "|---|---|---|---|"
    sed 's#^github.com/headroom-k8s/headroom/##' "$results" |
      awk '{ s = $4; sub(/s$/, "", s); r = $3 == "PASS" ? "pass" : $3 == "FAIL" ? "**fail**" : "skip"; printf "| `%s` | %s | %s | %s |\n", $1, $2, r, s }'
  } >"${results%.txt}.md"
  echo "$(grep -c ' PASS ' "$results") passed, $(grep -c ' FAIL ' "$results") failed, $(grep -c ' SKIP ' "$results") skipped (Kubernetes $K8S_VERSION, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with changes'), $started to $(date -u +%H:%M) UTC): $results, ${results%.txt}.md (every line of go test -v: $log)"
}
started=$(date -u '+%d %B %Y, %H:%M')
trap summarize EXIT
run() { "$@" 2>&1 | tee -a "$log" | grep -v -e '^=== ' -e '^    ' -e '^--- PASS' -e '^PASS$'; return "${PIPESTATUS[0]}"; }
if [[ -n ${PKGS:-} ]]; then
  # shellcheck disable=SC2086 # PKGS is a list of patterns
  run go test "${flags[@]}" $PKGS
  exit
fi
run go test "${flags[@]}" -race ./pkg/... ./plugins/...
run go test "${flags[@]}" $(go list "${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" ./... | grep -v -e /pkg/ -e /plugins/)
for dir in test/cilium test/awsipamd; do
  (cd "$dir" && run go test -count=1 -timeout 60m -v ${TESTS:+-run "$TESTS"} ./...)
done
