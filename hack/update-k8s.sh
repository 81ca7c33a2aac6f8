#!/usr/bin/env bash
# Usage: hack/update-k8s.sh VERSION   (e.g. hack/update-k8s.sh v1.36.3)
#
# Points Headroom (and the tools module under hack/tools) at another Kubernetes
# release: requires k8s.io/kubernetes at VERSION and rewrites the replace block
# so that every staging module k8s.io/kubernetes replaces with ./staging/...
# resolves to the published v0.MINOR.PATCH tag of that module. The list of
# staging modules is read from k8s.io/kubernetes' own go.mod, so modules added
# or removed upstream are picked up without editing this script.
set -euo pipefail

version=${1:?usage: $0 VERSION (e.g. v1.36.3)}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "VERSION must look like v1.MINOR.PATCH, got $version" >&2; exit 2; }
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
root=$(cd "$(dirname "$0")/.." && pwd)

modfile=$(cd "$root" && go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -f $modfile ]] || { echo "could not download k8s.io/kubernetes@${version}" >&2; exit 1; }

modules=$(sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$modfile")
[[ -n $modules ]] || { echo "no staging replace directives found in $modfile" >&2; exit 1; }

for dir in "$root" "$root/hack/tools"; do
  [[ -f $dir/go.mod ]] || continue
  (
    cd "$dir"
    args=(-require="k8s.io/kubernetes@${version}")
    for m in $modules; do args+=(-replace="${m}=${m}@${staging}"); done
    go mod edit "${args[@]}"
    go mod tidy
  )
  echo "updated $dir/go.mod: k8s.io/kubernetes ${version}, $(wc -w <<<"$modules") staging modules at ${staging}"
done
