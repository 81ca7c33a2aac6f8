#!/usr/bin/env bash
# Builds into bin/, through the Go module proxy only, from pinned versions:
# - the local control plane (etcd, kube-apiserver, kube-controller-manager,
#   kubectl, kwok), the code generators and the kubelet: hack/tools/go.mod;
# - helm: hack/tools/helm/go.mod;
# - promtool (the alerting rules' tests): hack/tools/prometheus/go.mod;
# - the rest of a real node: containerd, ctr and containerd-shim-runc-v2
#   (hack/tools/containerd), runc (hack/tools/runc), the CNI plugins bridge,
#   host-local and loopback (hack/tools/cni), and the sandbox image
#   bin/images/pause.tar, compiled from Kubernetes' own pause.c.
# A tool already built from the same go.mod, go.sum and build flags is
# skipped, so a warm run costs nothing.
#
# MINOR=1.35 builds that Kubernetes minor's kube-apiserver,
# kube-controller-manager, kubectl and kubelet (hack/k8s-minors.txt; the
# module hack/minors/1.35/tools, or hack/tools for the default minor) into
# bin/minors/1.35/, and links every minor-independent binary of bin/ (etcd,
# kwok, containerd, runc, CNI plugins, helm, promtool, ..., the pause image)
# beside them: run it after hack/build-tools.sh without MINOR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
mkdir -p "$BIN_DIR"

# build NAME PACKAGE [GO BUILD FLAGS...]: builds PACKAGE of the current
# directory's module into $out/NAME (bin/ unless MINOR). Its stamp is $stamp
# (the module's files) with CGO_ENABLED and the flags, so a change of either
# rebuilds it.
out=$BIN_DIR
build() {
  local name=$1 pkg=$2 s
  shift 2
  s=$(printf '%s\n' "$stamp" "${CGO_ENABLED-}" "$pkg" "$@" | sha256sum | cut -c1-16)
  if [[ -x $out/$name && "$(cat "$out/.$name.stamp" 2>/dev/null)" == "$s" ]]; then
    return
  fi
  echo ">> building $name ($pkg)"
  rm -f "$out/$name"
  go build -trimpath "$@" -o "$out/$name" "$pkg"
  echo "$s" >"$out/.$name.stamp"
}

# The binaries of one Kubernetes minor; all else is shared by every minor.
minor_binaries=(kube-apiserver kube-controller-manager kubectl kubelet)
if [[ -n $MINOR ]]; then
  out=$MINOR_BIN_DIR
  mkdir -p "$out/images"
  if [[ $MINOR == "$K8S_DEFAULT_MINOR" ]]; then
    # The default minor's are bin/'s own (hack/build-tools.sh without MINOR).
    for name in "${minor_binaries[@]}"; do
      rm -f "$out/.$name.stamp"
      ln -sfn "../../$name" "$out/$name"
    done
  else
    cd "$HEADROOM_ROOT/$(minor_tools_dir "$MINOR")"
    stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
    ldflags=$(k8s_ldflags "$K8S_VERSION")
    for name in kube-apiserver kube-controller-manager kubectl; do
      build "$name" "k8s.io/kubernetes/cmd/$name" -ldflags "$ldflags"
    done
    # A minor whose kubelet cannot be built from the proxy leaves it out of
    # its tools module (1.38: hack/minors/1.38/tools/go.mod says why).
    if go mod edit -json | grep -q '"Path": "k8s.io/kubernetes/cmd/kubelet"'; then
      CGO_ENABLED=0 build kubelet k8s.io/kubernetes/cmd/kubelet -ldflags "$ldflags"
    fi
  fi
  # Everything else from bin/, linked (relative, so bin/ can move). Never
  # a minor's own binary or Headroom's (hack/build.sh with MINOR builds
  # those here), so that a missing one fails instead of running another
  # minor's.
  for f in "$BIN_DIR"/* "$BIN_DIR"/images/pause.tar; do
    name=$(basename "$f")
    [[ -f $f ]] || continue
    case " ${minor_binaries[*]} " in *" $name "*) continue ;; esac
    case $name in headroom-* | kubectl-headroom | kubectl_complete-headroom) continue ;; esac
    if [[ $f == */images/* ]]; then ln -sfn "../../../images/$name" "$out/images/$name"; else ln -sfn "../../$name" "$out/$name"; fi
  done
  exit 0
fi

# apt_ensure PACKAGE...: installs the Debian packages that are missing. Only
# runc and pause need any (a C compiler, glibc's and libseccomp's static
# libraries), so a machine that has them never touches apt, and apt-get
# update runs only when a package has no install candidate yet. Off Debian
# there is nothing to ask: the compiler names what it lacks.
apt_ensure() {
  local installed missing=() p sudo=
  command -v dpkg-query >/dev/null || return 0
  installed=$'\n'$(dpkg-query -W -f '${db:Status-Status} ${Package}\n' "$@" 2>/dev/null || true)$'\n'
  for p in "$@"; do
    [[ $installed == *$'\n'"installed $p"$'\n'* ]] || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) == 0 ]] || sudo=sudo
  for p in "${missing[@]}"; do
    if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]'; then
      $sudo apt-get update -qq
      break
    fi
  done
  echo ">> installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# module_dir MODULE: the module's directory in the module cache, downloaded
# first if absent: go list -m alone answers an empty Dir then (e.g. after
# go clean -modcache, with every stamp still current).
module_dir() {
  local dir
  dir=$(go list -m -f '{{.Dir}}' "$1")
  if [[ -z $dir ]]; then
    go mod download "$1"
    dir=$(go list -m -f '{{.Dir}}' "$1")
  fi
  echo "$dir"
}

cd "$HEADROOM_ROOT/hack/tools"
stamp=$(cat go.mod go.sum etcd/main.go | sha256sum | cut -c1-16)
ldflags=$(k8s_ldflags "$K8S_VERSION")

build etcd ./etcd -ldflags "$ldflags"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver -ldflags "$ldflags"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager -ldflags "$ldflags"
build kubectl k8s.io/kubernetes/cmd/kubectl -ldflags "$ldflags"
build kwok sigs.k8s.io/kwok/cmd/kwok -ldflags "$ldflags"
build deepcopy-gen k8s.io/code-generator/cmd/deepcopy-gen -ldflags "$ldflags"
build conversion-gen k8s.io/code-generator/cmd/conversion-gen -ldflags "$ldflags"
build defaulter-gen k8s.io/code-generator/cmd/defaulter-gen -ldflags "$ldflags"
# The real node's kubelet: the control plane's module and version, so that
# both halves of the cluster are one release. No cgo below it but the
# standard library's, so it is built static, like Kubernetes' own release.
# The ldflags make it report its release, not v0.0.0-master.
CGO_ENABLED=0 build kubelet k8s.io/kubernetes/cmd/kubelet -ldflags "$ldflags"

# kwok's node and pod lifecycle stages, shipped in its module.
stages=$(module_dir sigs.k8s.io/kwok)/kustomize/stage
for f in "$stages"/node/fast/*.yaml "$stages"/node/heartbeat/node-heartbeat.yaml "$stages"/pod/fast/pod-*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] && continue
  echo "---"; cat "$f"
done >"$BIN_DIR/kwok-stages.yaml"

# Kubernetes' pause.c, from the same module (build/pause/linux).
pause_c=$(module_dir k8s.io/kubernetes)/build/pause/linux/pause.c

# Helm, from its own module (hack/tools/helm), so that its dependencies never
# move the versions the control plane above is built with.
cd "$HEADROOM_ROOT/hack/tools/helm"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
build helm helm.sh/helm/v4/cmd/helm -ldflags "$ldflags"

# promtool, from Prometheus' own module (hack/tools/prometheus), for
# `promtool test rules` of manifests/monitoring/prometheus-rules.yaml.
# remove_all_sd, Prometheus' own build tag, leaves out the service-discovery
# plugins (the cloud providers' SDKs), which rule tests never use: a cold
# build compiles (and downloads) a fraction of what the full promtool needs.
# The module v0.3XX.Y is Prometheus 3.XX.Y, which promtool --version prints.
cd "$HEADROOM_ROOT/hack/tools/prometheus"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
v=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
build promtool github.com/prometheus/prometheus/cmd/promtool -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=3.${v#v0.3}"

# containerd as its release builds it (static, no cgo: the shim is started
# by containerd in every pod and must not depend on the host's libc). The
# tags leave out the snapshotters that need cgo or host tools (btrfs,
# devicemapper, zfs); overlayfs and native remain. version.Version is what
# its Makefile sets from git, else it reports "2.4.2+unknown".
cd "$HEADROOM_ROOT/hack/tools/containerd"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
v=$(go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
for cmd in containerd ctr containerd-shim-runc-v2; do
  CGO_ENABLED=0 build "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" -tags 'no_btrfs no_devmapper no_zfs' \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$v"
done

# runc needs cgo (its nsenter is C; seccomp is libseccomp). Static, as its
# release is, so it runs wherever containerd starts it; netgo and osusergo
# keep glibc's NSS out of a static binary. Without the seccomp tag every pod
# fails: the kubelet always asks for the RuntimeDefault seccomp profile.
# libpathrs, in its Makefile's default tags, is a Rust library: left out,
# runc resolves paths with its Go implementation (pathrs-lite). Its version
# comes from the VERSION file the module embeds.
apt_ensure gcc libc6-dev pkg-config libseccomp-dev
cd "$HEADROOM_ROOT/hack/tools/runc"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
CGO_ENABLED=1 build runc github.com/opencontainers/runc -tags 'seccomp urfave_cli_no_docs netgo osusergo' \
  -ldflags '-s -w -extldflags -static'

# The CNI plugins the node's containerd calls, static as their release is.
# BuildVersion is what their release sets, printed by CNI_COMMAND=VERSION.
cd "$HEADROOM_ROOT/hack/tools/cni"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
v=$(go list -m -f '{{.Version}}' github.com/containernetworking/plugins)
for p in main/bridge main/loopback ipam/host-local; do
  CGO_ENABLED=0 build "${p#*/}" "github.com/containernetworking/plugins/plugins/$p" \
    -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$v"
done

# The sandbox image: pause.c compiled as Kubernetes' build/pause Makefile
# does (static, -Os, stripped; VERSION is what `pause -v` prints), then
# written by hack/images as registry.k8s.io/pause:$PAUSE_VERSION, so that
# the node's containerd imports it instead of pulling it. -Werror is left
# out: a newer gcc's new warning must not stop the build. hack/images runs
# it as 65532:65532 where Kubernetes' image says 65535:65535: pause needs no
# privilege and no file but itself, so any non-root user serves.
cd "$HEADROOM_ROOT"
pause_cflags=(-Os -Wall -static -s "-DVERSION=v$PAUSE_VERSION-$K8S_VERSION")
s=$(cat "$pause_c" <(printf '%s\n' "${pause_cflags[@]}") | sha256sum | cut -c1-16)
if [[ ! -x $BIN_DIR/pause || "$(cat "$BIN_DIR/.pause.stamp" 2>/dev/null)" != "$s" ]]; then
  echo ">> building pause ($pause_c)"
  gcc "${pause_cflags[@]}" -o "$BIN_DIR/pause" "$pause_c"
  echo "$s" >"$BIN_DIR/.pause.stamp"
fi
# The image changes with the binary, the image writer or its module's go.sum.
s=$(cat "$BIN_DIR/pause" hack/images/main.go go.sum <(echo "$PAUSE_VERSION") | sha256sum | cut -c1-16)
if [[ ! -f $BIN_DIR/images/pause.tar || "$(cat "$BIN_DIR/images/.pause.tar.stamp" 2>/dev/null)" != "$s" ]]; then
  echo ">> writing $BIN_DIR/images/pause.tar"
  go run ./hack/images -out "$BIN_DIR/images" -registry "${PAUSE_IMAGE%/*}" -version "$PAUSE_VERSION" \
    -source https://github.com/kubernetes/kubernetes -revision "$K8S_VERSION" "$BIN_DIR/pause" >/dev/null
  echo "$s" >"$BIN_DIR/images/.pause.tar.stamp"
fi
