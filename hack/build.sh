#!/usr/bin/env bash
# Builds Headroom's binaries into bin/: static (CGO_ENABLED=0; the test
# workload headroom-stress with cgo, linked statically), -trimpath.
# Go's build cache makes a warm run cheap.
#   hack/build.sh          the binaries, for this machine
#   hack/build.sh images   the binaries, then the OCI image tarballs of the
#                          in-cluster ones (built for linux) in bin/images/
# MINOR=1.35 builds for that Kubernetes minor of hack/k8s-minors.txt (its
# go.mod and build tag, hack/lib.sh) into bin/minors/1.35/ (images in
# bin/minors/1.35/images/, tagged with its release, e.g.
# v1.35.4-headroom.0.1.0); without MINOR, the default minor into bin/.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
# Every binary reports $HEADROOM_VERSION (hack/lib.sh) through
# k8s.io/component-base/version: `--version` prints "Kubernetes <version>";
# the descheduler's own `version` subcommand prints it too.
ldflags=$(headroom_ldflags)
export CGO_ENABLED=0

# build DIR: every binary whose cmd/ directory exists, into DIR.
build() {
  local dir=$1 cmd out
  mkdir -p "$dir"
  for cmd in scheduler descheduler node-agent kubectl-headroom stress; do
    [[ -d cmd/$cmd ]] || continue
    out=headroom-$cmd
    [[ $cmd == kubectl-headroom ]] && out=$cmd
    if [[ $cmd == stress ]]; then
      build_stress "$dir/$out"
      continue
    fi
    # grpcnotrace: the node agent's CRI client (gRPC) would otherwise link
    # golang.org/x/net/trace, whose html/template keeps every method of
    # every type alive: 49.9 MB instead of 30.9 MB (stripped).
    go build "${MINOR_GOFLAGS[@]}" -trimpath -tags "grpcnotrace,$MINOR_TAG" -ldflags "$ldflags" -o "$dir/$out" "./cmd/$cmd"
  done
  # kubectl's completion of the plugin: a script beside it on PATH.
  install -m 0755 cmd/kubectl-headroom/kubectl_complete-headroom "$dir/"
}

# build_stress OUT: the test workload. It holds threads and processes from
# C, beside the Go runtime rather than through it (see cmd/stress/hold.go),
# so it is the one cgo binary; linked statically, because its image has no
# base layer to bring a libc (glibc's static libraries: Debian's
# libc6-dev). netgo and osusergo keep glibc's NSS, which a static binary
# cannot load, out of it. It is Linux-only, and cgo for another platform
# needs that platform's C compiler: without one in CC it is left out.
build_stress() {
  local out=$1
  [[ $(go env GOOS) == linux ]] || return 0
  if [[ $(go env GOHOSTOS)/$(go env GOHOSTARCH) != linux/$(go env GOARCH) && -z ${CC:-} ]]; then
    echo "hack/build.sh: skipping headroom-stress: cgo for linux/$(go env GOARCH) needs a C compiler for it in CC" >&2
    return 0
  fi
  CGO_ENABLED=1 go build "${MINOR_GOFLAGS[@]}" -trimpath -tags "netgo,osusergo,$MINOR_TAG" \
    -ldflags "$ldflags -linkmode external -extldflags -static" -o "$out" ./cmd/stress
}
build "$MINOR_BIN_DIR"

if [[ ${1:-} == images ]]; then
  # The images' binaries are linux ones: this machine's when it runs linux.
  linux_bin=$MINOR_BIN_DIR
  if [[ $(go env GOOS) != linux ]]; then
    linux_bin=$MINOR_BIN_DIR/linux
    GOOS=linux build "$linux_bin"
  fi
  binaries=()
  for b in headroom-scheduler headroom-descheduler headroom-node-agent headroom-stress; do
    [[ -x $linux_bin/$b ]] && binaries+=("$linux_bin/$b")
  done
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  created=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
  go run ./hack/images -out "$MINOR_BIN_DIR/images" -version "$HEADROOM_VERSION" \
    -arch "$(GOOS=linux go env GOARCH)" -revision "$revision" -created "$created" "${binaries[@]}"
fi
