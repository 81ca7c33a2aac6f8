#!/usr/bin/env bash
# The checks a reviewer runs first: formatting, vet, tidy modules and
# generated code that matches its sources.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
fail=0

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n $unformatted ]]; then echo "gofmt needed:"; echo "$unformatted"; fail=1; fi

go vet ./... || fail=1
# The side-by-side benchmark (make e2e-bench) builds only with its tag.
go vet -tags e2ebench ./test/e2ebench || fail=1

for dir in . hack/tools hack/tools/helm hack/tools/release hack/tools/prometheus hack/tools/containerd hack/tools/runc hack/tools/cni hack/tools/compat test/cilium; do
  (cd "$dir" && go mod tidy &&
    if ! git diff --quiet -- go.mod go.sum; then echo "go mod tidy changes $dir/go.mod or go.sum"; git diff --stat -- go.mod go.sum; exit 1; fi) || fail=1
done

hack/update-codegen.sh >/dev/null
if ! git diff --quiet -- '*zz_generated*'; then
  echo "generated code is out of date: run make generate"; git diff --stat -- '*zz_generated*'; fail=1
fi
hack/update-chart.sh >/dev/null
if [[ -n $(git status --porcelain -- manifests/charts) ]]; then
  echo "the Helm chart is out of step with manifests/: run make generate"; git status --short -- manifests/charts; fail=1
fi
exit $fail
