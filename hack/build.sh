#!/usr/bin/env bash
# Builds Headroom's binaries into bin/: static (CGO_ENABLED=0), -trimpath,
# for linux. Go's build cache makes a warm run cheap.
#   hack/build.sh          the binaries
#   hack/build.sh images   the binaries, then the OCI image tarballs of the
#                          in-cluster ones in bin/images/ (hack/images)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
mkdir -p "$BIN_DIR"
# Every binary reports $HEADROOM_VERSION (hack/lib.sh) through
# k8s.io/component-base/version: `--version` prints "Kubernetes <version>".
ldflags=$(k8s_ldflags "$HEADROOM_VERSION")
export CGO_ENABLED=0 GOOS=linux
for cmd in scheduler descheduler node-agent pid-reporter kubectl-headroom; do
  [[ -d cmd/$cmd ]] || continue
  out=headroom-$cmd
  [[ $cmd == kubectl-headroom ]] && out=$cmd
  go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/$out" "./cmd/$cmd"
done

if [[ ${1:-} == images ]]; then
  # The images: one per in-cluster binary that exists.
  binaries=()
  for b in headroom-scheduler headroom-descheduler headroom-node-agent; do
    [[ -x $BIN_DIR/$b ]] && binaries+=("$BIN_DIR/$b")
  done
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  created=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
  unset GOOS
  go run ./hack/images -out "$BIN_DIR/images" -version "$HEADROOM_VERSION" \
    -revision "$revision" -created "$created" "${binaries[@]}"
fi
