#!/usr/bin/env bash
# The checks a reviewer runs first: formatting, vet, tidy modules,
# generated code that matches its sources, Markdown and the GitHub
# workflows.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
fail=0

# No build output in the tree: a tracked file larger than MAX_TRACKED_BYTES
# (the largest source today is docs/performance.md, 75 kB), or an executable
# one that is not a script (a "#!" first line), or any file with an ELF,
# Mach-O or PE header, fails. Binaries belong in the ignored bin/.
MAX_TRACKED_BYTES=${MAX_TRACKED_BYTES:-1048576}
while IFS= read -r -d '' entry; do
  mode=${entry%% *}; file=${entry#*$'\t'}
  [[ -f $file ]] || continue
  size=$(stat -c %s "$file")
  magic=$(head -c 4 "$file" | od -An -tx1 | tr -d ' \n')
  if ((size > MAX_TRACKED_BYTES)); then
    echo "tracked file $file is $size bytes (limit $MAX_TRACKED_BYTES): build outputs go in bin/"; fail=1
  elif [[ $magic == 7f454c46 || $magic == cffaedfe || $magic == cefaedfe || $magic == feedfacf || $magic == 4d5a* ]]; then
    echo "tracked file $file is a compiled binary: build outputs go in bin/"; fail=1
  elif [[ $mode == 100755 && $(head -c 2 "$file") != '#!' ]]; then
    echo "tracked file $file is executable but not a script: build outputs go in bin/"; fail=1
  fi
done < <(git ls-files -s -z)

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n $unformatted ]]; then echo "gofmt needed:"; echo "$unformatted"; fail=1; fi

go vet ./... || fail=1
# The side-by-side benchmark (make e2e-bench) builds only with its tag.
go vet -tags e2ebench ./test/e2ebench || fail=1
go vet -tags agentload ./test/agentload || fail=1

# Each with the toolchain its builds use (hack/lib.sh: 1.38's needs a newer Go).
for dir in . hack/tools hack/tools/helm hack/tools/release hack/tools/mdcheck hack/tools/actionlint hack/tools/prometheus hack/tools/containerd hack/tools/runc hack/tools/cni hack/minors/*/tools test/cilium test/awsipamd; do
  (cd "$dir" && toolchain=$(gomod_gotoolchain go.mod) && export GOTOOLCHAIN=${toolchain:-${GOTOOLCHAIN-}} && go mod tidy &&
    if ! git diff --quiet -- go.mod go.sum; then echo "go mod tidy changes $dir/go.mod or go.sum"; git diff --stat -- go.mod go.sum; exit 1; fi) || fail=1
done
# Headroom's go.mod of each other Kubernetes minor (hack/update-k8s.sh).
for mod in hack/minors/*/headroom.mod; do
  toolchain=$(gomod_gotoolchain "$mod") || fail=1
  GOTOOLCHAIN=${toolchain:-${GOTOOLCHAIN-}} go mod tidy -modfile="$mod" || fail=1
  if ! git diff --quiet -- "$mod" "${mod%.mod}.sum"; then echo "go mod tidy changes $mod: run hack/update-k8s.sh -pinned"; fail=1; fi
done

# Docs are code: every Markdown file as a CommonMark parser reads it, with
# fences closed and relative links and anchors that resolve (hack/tools/mdcheck).
(cd hack/tools/mdcheck && go build -o "$BIN_DIR/mdcheck" .)
git ls-files -z '*.md' | xargs -0 "$BIN_DIR/mdcheck" || fail=1

# The GitHub Actions workflows, as GitHub reads them: syntax, expressions,
# contexts, permissions, action inputs (hack/tools/actionlint; it also
# runs shellcheck on the run: scripts where shellcheck is installed).
(cd hack/tools/actionlint && go build -o "$BIN_DIR/actionlint" github.com/rhysd/actionlint/cmd/actionlint)
"$BIN_DIR/actionlint" .github/workflows/*.yaml || fail=1

hack/update-codegen.sh >/dev/null
if ! git diff --quiet -- '*zz_generated*'; then
  echo "generated code is out of date: run make generate"; git diff --stat -- '*zz_generated*'; fail=1
fi
hack/update-chart.sh >/dev/null
if [[ -n $(git status --porcelain -- manifests test/prometheus) ]]; then
  echo "the Helm chart or the per-minor overlays are out of step with manifests/, hack/k8s-minors.txt or VERSION: run make generate"
  git status --short -- manifests test/prometheus; fail=1
fi
exit $fail
