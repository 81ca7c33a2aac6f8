#!/usr/bin/env bash
# Measures the node agent's writes at cluster scale against a real
# kube-apiserver (test/agentload): every node's agent (the real write policy,
# the shipped flags) replays the PID traces of the real node (at rest, a slow
# leak, the e2e-bench storm) on a fake clock, beside one round of the
# kubelets' Node status patches and Lease renewals for the same nodes.
# Prints writes/s, patch-body bytes/s and the API server's and etcd's CPU
# per hour of cluster time (docs/performance.md, "The node agent's writes").
# Needs bin/etcd and bin/kube-apiserver (make tools).
#
#   AGENT_LOAD_NODES  comma-separated node counts (default 5000,15000)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
echo "load before: $(uptime)"
HEADROOM_AGENT_LOAD_NODES="${AGENT_LOAD_NODES:-5000,15000}" \
  go test -tags agentload ./test/agentload -run '^TestAgentWriteLoad$' -count=1 -v -timeout 3h
echo "load after: $(uptime)"
