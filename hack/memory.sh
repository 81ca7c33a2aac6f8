#!/usr/bin/env bash
# Measures the memory of headroom-scheduler and headroom-descheduler, the
# real binaries with the shipped configuration and identities, against a
# local control plane with NODES nodes (default 5000) and PODS pods (default
# 10000): the figures the shipped memory requests and limits are sized from
# (docs/performance.md, "Memory of the components"). Takes several minutes;
# not part of make test.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
hack/build-tools.sh >/dev/null
hack/build.sh
HEADROOM_MEASURE_MEMORY=1 HEADROOM_MEMORY_NODES=${NODES:-5000} HEADROOM_MEMORY_PODS=${PODS:-10000} \
  go test -count=1 -timeout 45m -run '^TestMemory$' -v ./test/integration/ | grep -E '^\s+memory_test.go|^(ok|FAIL|---)'
