#!/usr/bin/env bash
# Builds Headroom's binaries into bin/: static (CGO_ENABLED=0), -trimpath.
# Go's build cache makes a warm run cheap.
#   hack/build.sh          the binaries, for this machine
#   hack/build.sh images   the binaries, then the OCI image tarballs of the
#                          in-cluster ones (built for linux) in bin/images/
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
# Every binary reports $HEADROOM_VERSION (hack/lib.sh) through
# k8s.io/component-base/version: `--version` prints "Kubernetes <version>";
# the descheduler's own `version` subcommand prints it too.
ldflags="$(k8s_ldflags "$HEADROOM_VERSION") -X sigs.k8s.io/descheduler/pkg/version.version=$HEADROOM_VERSION"
export CGO_ENABLED=0

# build DIR: every binary whose cmd/ directory exists, into DIR.
build() {
  local dir=$1 cmd out
  mkdir -p "$dir"
  for cmd in scheduler descheduler node-agent kubectl-headroom; do
    [[ -d cmd/$cmd ]] || continue
    out=headroom-$cmd
    [[ $cmd == kubectl-headroom ]] && out=$cmd
    go build -trimpath -ldflags "$ldflags" -o "$dir/$out" "./cmd/$cmd"
  done
}
build "$BIN_DIR"

if [[ ${1:-} == images ]]; then
  # The images' binaries are linux ones: this machine's when it runs linux.
  linux_bin=$BIN_DIR
  if [[ $(go env GOOS) != linux ]]; then
    linux_bin=$BIN_DIR/linux
    GOOS=linux build "$linux_bin"
  fi
  binaries=()
  for b in headroom-scheduler headroom-descheduler headroom-node-agent; do
    [[ -x $linux_bin/$b ]] && binaries+=("$linux_bin/$b")
  done
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  created=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
  go run ./hack/images -out "$BIN_DIR/images" -version "$HEADROOM_VERSION" \
    -arch "$(GOOS=linux go env GOARCH)" -revision "$revision" -created "$created" "${binaries[@]}"
fi
