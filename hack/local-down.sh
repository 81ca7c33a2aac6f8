#!/usr/bin/env bash
# Stops the cluster hack/local-up.sh started and removes its data.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
[[ -x $BIN_DIR/localup ]] || go build -o "$BIN_DIR/localup" ./hack/localup
exec "$BIN_DIR/localup" -down -dir "${LOCAL_DIR:-$HEADROOM_ROOT/.local}"
