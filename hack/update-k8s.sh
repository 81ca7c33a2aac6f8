#!/usr/bin/env bash
# Usage: hack/update-k8s.sh [-pinned]
#
# Keeps every Kubernetes minor of hack/k8s-minors.txt current in one command:
# 1. moves each minor's line to the newest k8s.io/kubernetes patch release of
#    that minor the Go module proxy serves (a preview line: the newest
#    release of its minor, pre-releases included) and its descheduler to the
#    newest sigs.k8s.io/descheduler v0.MINOR.x, where one is served (else it
#    keeps the one it has: no v0.37 exists yet); -pinned skips this step;
# 2. writes each minor's go.mod from that file: the default minor's are the
#    root go.mod, hack/tools/go.mod and the test modules that build
#    Headroom's packages (test/cilium, test/awsipamd); every other minor's are
#    hack/minors/MINOR/headroom.mod (the root go.mod's direct requirements
#    with that minor's pins, at Kubernetes' versions where it requires them
#    too; built through go's -modfile) and
#    hack/minors/MINOR/tools/go.mod (its kube-apiserver,
#    kube-controller-manager, kubectl and kubelet). k8s.io/kubernetes is
#    required at the minor's release and every staging module it replaces
#    with ./staging/... (the list read from that release's own go.mod, so
#    modules added or removed upstream are picked up) is replaced to the
#    published v0.MINOR.PATCH; k8s.io/kube-openapi is replaced to the later
#    of Kubernetes' and the descheduler's own pins (without it the build asks
#    for a version that is not served). A line whose release needs a newer
#    Go than the machine's (1.38) is written with GOTOOLCHAIN set to
#    hack/lib.sh's NEWER_GOTOOLCHAIN, as its builds are. A module the
#    descheduler's packages need older than a minor's release requires it
#    is replaced in that minor's headroom.mod (the HELD list below);
# 3. removes hack/minors/ directories of minors no longer listed, or now the
#    default.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"

# gomod MODULE@VERSION: the path of that version's go.mod in the module cache.
gomod() {
  local f
  f=$(go mod download -json "$1" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [[ -f $f ]] || { echo "could not download $1" >&2; return 1; }
  echo "$f"
}

if [[ ${1:-} != -pinned ]]; then
  k8s_versions=$(go list -m -versions k8s.io/kubernetes)
  desched_versions=$(go list -m -versions sigs.k8s.io/descheduler)
  while read -r minor version desched mark; do
    n=${minor#1.}
    pattern="^v1\.$n\.[0-9]+$"
    [[ $mark == preview ]] && pattern="^v1\.$n\.[0-9]+(-(alpha|beta|rc)\.[0-9]+)?$"
    newest=$(tr ' ' '\n' <<<"$k8s_versions" | grep -E "$pattern" | sort -V | tail -1)
    # sort -V puts v1.38.0 before v1.38.0-beta.0: a release wins over its pre-releases.
    release=$(tr ' ' '\n' <<<"$k8s_versions" | grep -E "^v1\.$n\.[0-9]+$" | sort -V | tail -1)
    [[ -n $release ]] && newest=$release
    d=$(tr ' ' '\n' <<<"$desched_versions" | grep -E "^v0\.$n\.[0-9]+$" | sort -V | tail -1)
    sed -i -E "s/^$minor ${version//./\\.} ${desched//./\\.}/$minor ${newest:-$version} ${d:-$desched}/" "$K8S_MINORS_FILE"
  done < <(awk '!/^#/ && NF' "$K8S_MINORS_FILE")
fi

# pin FILE VERSION DESCHEDULER [TOOLS]: requires k8s.io/kubernetes at VERSION
# (and, unless TOOLS, the descheduler at DESCHEDULER) in the go.mod FILE and
# replaces every staging module and kube-openapi, then tidies it.
pin() {
  local file=$1 version=$2 desched=$3 tools=${4:-} kmod staging modules openapi m args
  kmod=$(gomod "k8s.io/kubernetes@$version")
  staging=v0.${version#v1.}
  modules=$(sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$kmod")
  [[ -n $modules ]] || { echo "no staging replace directives found in $kmod" >&2; return 1; }
  openapi=$( (awk '$1 == "k8s.io/kube-openapi" { print $2; exit }' "$kmod"
    sed -n 's/^replace k8s.io\/kube-openapi => k8s.io\/kube-openapi \(.*\)$/\1/p' "$(gomod "sigs.k8s.io/descheduler@$desched")") | sort | tail -1)
  args=(-require="k8s.io/kubernetes@$version" -replace="k8s.io/kube-openapi=k8s.io/kube-openapi@$openapi")
  [[ -n $tools ]] || args+=(-require="sigs.k8s.io/descheduler@$desched")
  for m in $modules; do
    args+=(-replace="$m=$m@$staging")
    # A staging module required directly is required at the version it is
    # replaced to, so that the file reads as what is built.
    if grep -qE "^[[:space:]]*(require[[:space:]]+)?${m//./\\.} v[^ ]+[[:space:]]*$" "$file"; then args+=(-require="$m@$staging"); fi
  done
  (
    cd "$(dirname "$file")"
    go mod edit -modfile="$(basename "$file")" "${args[@]}"
    go mod tidy -modfile="$(basename "$file")"
  )
  echo "updated $file: k8s.io/kubernetes $version, $(wc -w <<<"$modules") staging modules at $staging, kube-openapi $openapi"
}

keep=()
machine_gotoolchain=${GOTOOLCHAIN-}
while read -r minor version desched mark; do
  # A release that needs a newer Go than the machine's (1.38's) is pinned
  # and tidied with the toolchain its builds use (hack/lib.sh), so that
  # tidy works out the module graph they read; every other line with the
  # machine's Go. Tidy raises the go directive of the minor's go.mod files
  # to the release's, from which hack/lib.sh picks that toolchain again.
  toolchain=$(gotoolchain_for "$(go mod edit -json "$(gomod "k8s.io/kubernetes@$version")" | sed -n 's/^\t"Go": "\(.*\)",$/\1/p')")
  export GOTOOLCHAIN=${toolchain:-$machine_gotoolchain}
  [[ -z $toolchain ]] || echo "$minor: k8s.io/kubernetes $version needs a newer Go than $MACHINE_GO: pinned with GOTOOLCHAIN=$toolchain" >&2
  if [[ $mark == default ]]; then
    pin go.mod "$version" "$desched"
    pin hack/tools/go.mod "$version" "$desched" tools
    # The test modules that import Headroom's packages (replaced with the
    # root) build on the default minor's modules too.
    for m in test/cilium/go.mod test/awsipamd/go.mod; do pin "$m" "$version" "$desched" tools; done
    continue
  fi
  dir=hack/minors/$minor
  keep+=("$dir")
  mkdir -p "$dir/tools"
  # Headroom's go.mod for this minor: the root's module line, go version
  # and direct requirements (its indirect ones and replaces are the
  # minor's own, worked out by tidy).
  {
    echo "// Headroom built for Kubernetes $minor (hack/k8s-minors.txt): the root"
    echo "// go.mod's direct requirements with this minor's pins, used through"
    echo "// go's -modfile (hack/lib.sh). Written by hack/update-k8s.sh: do not edit."
    awk '/^require \($/ { blk++ } blk == 2 && /^\)$/ { blk = 3; next } blk == 2 || /^replace / || /^\/\// { next } { print }' go.mod |
      cat -s
  } >"$dir/headroom.mod"
  # A direct requirement that Kubernetes requires too takes Kubernetes'
  # version (tidy lifts it where another module needs more): a newer one
  # can break the minor's own packages (opencontainers/cgroups v0.0.6
  # breaks v1.35's kubelet, which the tests import).
  kmod=$(gomod "k8s.io/kubernetes@$version")
  args=()
  for m in $(go mod edit -json go.mod | awk '/"Path":/ { p = $2 } /"Indirect": true/ { p = "" } /^		}/ && p { gsub(/[",]/, "", p); print p; p = "" }'); do
    v=$(awk -v m="$m" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$kmod")
    [[ -n $v && $m != k8s.io/* ]] && args+=(-require="$m@$v")
  done
  # A module the descheduler's packages need older than the release
  # requires it: replaced for that minor (MINOR MODULE VERSION why).
  while read -r m mod v _; do
    [[ $m == "$minor" ]] && args+=(-replace="$mod=$mod@$v")
  done <<'HELD'
1.38 github.com/prometheus/client_golang v1.24.1 v1.25.0's API.Query returns 4 values, descheduler v0.36.0's nodeutilization takes 3
HELD
  ((${#args[@]})) && go mod edit -modfile="$dir/headroom.mod" "${args[@]}"
  pin "$dir/headroom.mod" "$version" "$desched"
  # The control plane and kubelet of this minor, a module of their own.
  if [[ ! -f $dir/tools/go.mod ]]; then
    cat >"$dir/tools/go.mod" <<EOF
// kube-apiserver, kube-controller-manager, kubectl and kubelet of
// Kubernetes $minor, built from the Go module proxy by hack/build-tools.sh
// with MINOR=$minor. Written by hack/update-k8s.sh.
module github.com/headroom-k8s/headroom/hack/minors/$minor/tools

go $(go mod edit -json go.mod | sed -n 's/^\t"Go": "\(.*\)",$/\1/p')

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kubectl
	k8s.io/kubernetes/cmd/kubelet
)
EOF
  fi
  pin "$dir/tools/go.mod" "$version" "$desched" tools
done < <(awk '!/^#/ && NF' "$K8S_MINORS_FILE")

for dir in hack/minors/*/; do
  dir=${dir%/}
  [[ -d $dir ]] || continue
  case " ${keep[*]} " in *" $dir "*) ;; *) echo "removing $dir (not a non-default minor of hack/k8s-minors.txt)"; rm -rf "$dir" ;; esac
done
