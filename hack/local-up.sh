#!/usr/bin/env bash
# Brings up the demo on this machine: builds what is missing, starts a local
# control plane with NODES kwok nodes (default 10), headroom-scheduler as the
# secondary scheduler "headroom-scheduler", applies the demo Deployment and
# prints where its pods landed; then runs headroom-descheduler every 20s,
# drives one node into PID pressure and prints what was evicted, in order
# and why, and where the replacements landed; where the machine allows, a
# PID storm on the first of two real nodes is relieved and its replacement
# starts on the second. The cluster keeps running: hack/local-down.sh
# (make down) stops it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
hack/build-tools.sh
hack/build.sh images
go build -o "$BIN_DIR/localup" ./hack/localup
exec "$BIN_DIR/localup" -nodes "${NODES:-10}" -dir "${LOCAL_DIR:-$HEADROOM_ROOT/.local}" "$@"
