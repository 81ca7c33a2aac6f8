#!/usr/bin/env bash
# Builds Headroom's binaries into bin/. Go's build cache makes a warm run cheap.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
mkdir -p "$BIN_DIR"
# Headroom binaries report the Kubernetes release they embed, with Headroom's
# commit as build metadata: "v1.36.3+headroom.<commit>".
commit=$(git rev-parse --short HEAD 2>/dev/null || echo dev)
ldflags=$(k8s_ldflags "$K8S_VERSION+headroom.$commit")
for cmd in scheduler descheduler node-agent; do
  [[ -d cmd/$cmd ]] || continue
  go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/headroom-$cmd" "./cmd/$cmd"
done
