#!/usr/bin/env bash
# make test-kubectl-minors [MINORS="1.35 1.36"] [TESTS=regexp]:
# kubectl-headroom is one build, the default minor's (make build's, the one
# make release ships), and must work against every supported minor's API
# server. This runs its integration tests
# (test/integration/kubectl_headroom_test.go, built as make test builds
# them) with that kubectl-headroom against each minor's control plane: the
# minor's kube-apiserver, kube-controller-manager and kubectl
# (hack/build-tools.sh with MINOR, cached in bin/minors/MINOR/) and the
# minor's own Headroom binaries wherever the tests start one (hack/build.sh
# with MINOR), so that nothing but the client under test is newer than its
# API server. Run make tools first (etcd, kwok: every minor's).
#   MINORS  the minors of hack/k8s-minors.txt to run against (default:
#           every shipped one)
#   TESTS   a go test -run pattern (default: every kubectl-headroom test)
# Each minor's test output goes to bin/kubectl-minors/MINOR.log; a table of
# each test's result per minor ends the run, which fails if any test did.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"

minors=${MINORS:-$(shipped_minors | awk '{ print $1 }')}
tests=${TESTS:-^TestKubectlHeadroom}
out=$BIN_DIR/kubectl-minors
for minor in $minors; do
  [[ -n $(k8s_minor_field "$minor" 2) ]] ||
    { echo "MINORS: $minor is not a minor of hack/k8s-minors.txt ($(k8s_minors | paste -sd ' '))" >&2; exit 2; }
done

# The client under test.
MINOR= hack/build.sh
client=$("$BIN_DIR/kubectl-headroom" --version)

mkdir -p "$out"
results=()
failed=0
for minor in $minors; do
  echo ">> $minor: kubectl-headroom ($client) against $minor's control plane"
  MINOR=$minor hack/build-tools.sh
  MINOR=$minor hack/build.sh
  # The minor's binaries, but for kubectl-headroom and its completion
  # script: the default build's.
  dir=$out/$minor
  rm -rf "$dir"
  mkdir -p "$dir"
  for f in "$BIN_DIR/minors/$minor"/*; do
    name=$(basename "$f")
    case $name in
      kubectl-headroom | kubectl_complete-headroom) ln -s "$BIN_DIR/$name" "$dir/$name" ;;
      *) ln -s "$f" "$dir/$name" ;;
    esac
  done
  for b in kube-apiserver headroom-scheduler kubectl-headroom; do
    echo "   $b: $("$dir/$b" --version)"
  done
  log=$out/$minor.log
  if HEADROOM_BIN_DIR=$dir go test -count=1 -timeout 30m -v -run "$tests" ./test/integration/ >"$log" 2>&1; then
    status=ok
  else
    status=FAIL
    failed=1
  fi
  # Top-level tests only: "--- PASS: TestX (12.34s)".
  before=${#results[@]}
  while read -r result name took; do
    results+=("$minor $name ${result%:} ${took//[()]/}")
  done < <(grep -E '^--- (PASS|FAIL|SKIP): ' "$log" | cut -c5-)
  # A pattern that matches no test proves nothing: that fails too.
  if ((${#results[@]} == before)); then
    results+=("$minor (no-test-ran) FAIL -")
    status=FAIL
    failed=1
  fi
  echo ">> $minor: $status ($log)"
done

echo
printf '%-6s %-50s %s\n' minor test result
for r in "${results[@]}"; do
  read -r minor name result took <<<"$r"
  printf '%-6s %-50s %s %s\n' "$minor" "$name" "$result" "$took"
done
exit "$failed"
