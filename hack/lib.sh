# Sourced by hack/*.sh: paths and version helpers shared by the scripts.
HEADROOM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${BIN_DIR:-$HEADROOM_ROOT/bin}
# The Kubernetes minors Headroom is built for, one line each (minor,
# k8s.io/kubernetes, sigs.k8s.io/descheduler, default|preview): the one
# source of every script's list.
K8S_MINORS_FILE=$HEADROOM_ROOT/hack/k8s-minors.txt
k8s_minors() { awk '!/^#/ && NF { print $1 }' "$K8S_MINORS_FILE"; }
# k8s_minor_field MINOR N: field N of MINOR's line (2: k8s.io/kubernetes,
# 3: sigs.k8s.io/descheduler, 4: default or preview); empty if absent.
k8s_minor_field() { awk -v m="$1" -v n="$2" '!/^#/ && $1 == m { print $n }' "$K8S_MINORS_FILE"; }
K8S_DEFAULT_MINOR=$(awk '!/^#/ && $4 == "default" { print $1 }' "$K8S_MINORS_FILE")
# minor_modfile MINOR: the go.mod Headroom's packages are built with for
# MINOR, relative to the root: the root's own for the default minor,
# hack/minors/MINOR/headroom.mod (used through go's -modfile) for the
# others. minor_tools_dir MINOR: the module its kube-apiserver,
# kube-controller-manager, kubectl and kubelet are built from.
minor_modfile() { if [[ $1 == "$K8S_DEFAULT_MINOR" ]]; then echo go.mod; else echo "hack/minors/$1/headroom.mod"; fi; }
minor_tools_dir() { if [[ $1 == "$K8S_DEFAULT_MINOR" ]]; then echo hack/tools; else echo "hack/minors/$1/tools"; fi; }
# A minor whose Kubernetes release needs a newer Go than the machine's (the
# go directive of its go.mod; v1.38.0-beta.0 says go 1.27.0) is built and
# tested with NEWER_GOTOOLCHAIN, which the go command fetches from the Go
# module proxy; every other minor with the machine's own Go. A go.mod's
# go directive never says which patch release to fetch, hence one pinned here.
NEWER_GOTOOLCHAIN=go1.27.3
MACHINE_GO=$(GOTOOLCHAIN=local go env GOVERSION)
# gotoolchain_for GOVERSION: the GOTOOLCHAIN for a module whose go directive
# is GOVERSION (e.g. 1.27.0): empty where the machine's Go is new enough,
# else NEWER_GOTOOLCHAIN (an error where even that is too old).
gotoolchain_for() {
  local want=$1 have
  have=${MACHINE_GO#go}
  [[ $(printf '%s\n' "$want" "$have" | sort -V | tail -1) == "$have" ]] && return 0
  have=${NEWER_GOTOOLCHAIN#go}
  if [[ $(printf '%s\n' "$want" "$have" | sort -V | tail -1) != "$have" ]]; then
    echo "go $want is newer than NEWER_GOTOOLCHAIN=$NEWER_GOTOOLCHAIN (hack/lib.sh): raise it" >&2
    return 1
  fi
  echo "$NEWER_GOTOOLCHAIN"
}
# gomod_gotoolchain FILE: gotoolchain_for the go directive of the go.mod FILE.
gomod_gotoolchain() { gotoolchain_for "$(awk '$1 == "go" { print $2; exit }' "$1")"; }
# MINOR (environment, e.g. MINOR=1.35 hack/build.sh) picks the minor that
# hack/build.sh, hack/build-tools.sh and hack/test-minor.sh build for, into
# MINOR_BIN_DIR, bin/minors/MINOR/; without it, the default minor into bin/.
# Every build passes its minor's build tag, MINOR_TAG (k8s1.MINOR), which
# selects the few files that differ between minors (docs/compatibility.md),
# and MINOR_GOFLAGS, its go.mod.
MINOR=${MINOR:-}
if [[ -n $MINOR && -z $(k8s_minor_field "$MINOR" 2) ]]; then
  echo "MINOR=$MINOR: not a minor of hack/k8s-minors.txt ($(k8s_minors | paste -sd ' '))" >&2
  exit 2
fi
MINOR_BIN_DIR=$BIN_DIR${MINOR:+/minors/$MINOR}
BUILD_MINOR=${MINOR:-$K8S_DEFAULT_MINOR}
MINOR_TAG=k8s$BUILD_MINOR
MINOR_GOFLAGS=()
[[ $(minor_modfile "$BUILD_MINOR") == go.mod ]] || MINOR_GOFLAGS=(-modfile="$HEADROOM_ROOT/$(minor_modfile "$BUILD_MINOR")")
# The toolchain this minor's builds and tests need, for every go command
# the scripts start (empty: the machine's own, GOTOOLCHAIN left as it is).
MINOR_GOTOOLCHAIN=$(gomod_gotoolchain "$HEADROOM_ROOT/$(minor_modfile "$BUILD_MINOR")")
[[ -z $MINOR_GOTOOLCHAIN ]] || export GOTOOLCHAIN=$MINOR_GOTOOLCHAIN
# The Kubernetes release Headroom is built on, read from that go.mod so
# there is one source.
K8S_VERSION=$(cd "$HEADROOM_ROOT" && go list "${MINOR_GOFLAGS[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)
# shipped_minors: the Kubernetes minors Headroom ships images for, one
# "<minor> <Kubernetes release> [default]" line each, from
# hack/k8s-minors.txt (a preview line is built and tested, never shipped).
shipped_minors() { awk '!/^#/ && NF && $4 != "preview" { print $1, $2, $4 }' "$K8S_MINORS_FILE"; }
# minor_tag RELEASE: the image tag of the minor whose build embeds that
# Kubernetes release, e.g. v1.35.4-headroom.0.1.0 (docs/release.md, "Image tags").
minor_tag() {
  echo "$1-headroom.$(tr -d '[:space:]' <"$HEADROOM_ROOT/VERSION")"
}
# The version every Headroom binary reports and every image is tagged with:
# the Kubernetes release it embeds, then Headroom's own release from VERSION,
# e.g. v1.36.3-headroom.0.1.0. An image tag cannot hold semver's "+", so
# Headroom's part is a pre-release field; the kube-scheduler still reads its
# own version as 1.36 (compatibility and feature gates key on major.minor).
HEADROOM_VERSION=$(minor_tag "$K8S_VERSION")
k8s_ldflags() {
  local v=$1 major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}
# The flags Headroom's binaries are linked with (hack/build.sh, hack/release.sh):
# the version in component-base's and the descheduler's version packages.
headroom_ldflags() {
  echo "$(k8s_ldflags "$HEADROOM_VERSION") -X sigs.k8s.io/descheduler/pkg/version.version=$HEADROOM_VERSION"
}
# release_keyless_flags: with RELEASE_KEYLESS=true (the release workflow),
# sets keyless_sign to release sign's flags for keyless signing (Fulcio and
# Rekor: RELEASE_FULCIO_URL, RELEASE_REKOR_URL, default Sigstore's public
# ones) and keyless_verify to release verify's: the identity the release
# must be signed by (RELEASE_CERTIFICATE_IDENTITY_REGEXP, default the
# release workflow of github.com/headroom-k8s/headroom at a v* tag;
# RELEASE_CERTIFICATE_OIDC_ISSUER, default GitHub Actions') and the
# trusted root (RELEASE_TRUSTED_ROOT, default Sigstore's public one).
# Without it, both are empty: signed with a key, verified with cosign.pub.
release_keyless_flags() {
  keyless_sign=() keyless_verify=()
  case ${RELEASE_KEYLESS:-false} in
    false) ;;
    true)
      keyless_sign=(-keyless ${RELEASE_FULCIO_URL:+-fulcio-url "$RELEASE_FULCIO_URL"} ${RELEASE_REKOR_URL:+-rekor-url "$RELEASE_REKOR_URL"})
      keyless_verify=(
        -certificate-identity-regexp "${RELEASE_CERTIFICATE_IDENTITY_REGEXP:-^https://github\.com/headroom-k8s/headroom/\.github/workflows/release\.yaml@refs/tags/v}"
        -certificate-oidc-issuer "${RELEASE_CERTIFICATE_OIDC_ISSUER:-https://token.actions.githubusercontent.com}"
        ${RELEASE_TRUSTED_ROOT:+-trusted-root "$(realpath "$RELEASE_TRUSTED_ROOT")"}
      ) ;;
    *) echo "RELEASE_KEYLESS=$RELEASE_KEYLESS: want true or false" >&2; return 1 ;;
  esac
}
# The real node's sandbox image: hack/build-tools.sh writes it to
# bin/images/pause.tar under this name, and the node's containerd pins it
# (pinned_images.sandbox), so that it is imported, never pulled.
PAUSE_VERSION=3.10.2
PAUSE_IMAGE=registry.k8s.io/pause:$PAUSE_VERSION
# An awk function, median(s), of the numbers in the space-separated string s
# (0 for none): hack/perf.sh and hack/bench.sh summarise runs with it.
AWK_MEDIAN='
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    if (n == 0) return 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
'
