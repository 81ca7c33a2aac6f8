#!/usr/bin/env bash
# Measures the node agent's writes at cluster scale against a real
# kube-apiserver (test/agentload): every node's agent (the real write policy,
# the shipped flags) replays the PID traces of the real node (at rest, a slow
# leak, the e2e-bench storm) on a fake clock, beside one round of the
# kubelets' Node status patches and Lease renewals for the same nodes.
# Prints writes/s, patch-body bytes/s and the API server's and etcd's CPU
# per hour of cluster time (docs/performance.md, "The node agent's writes").
# Then (TestWatchLoad) what the agents' Calico IPAMBlock watches cost the API
# server at 5,000 nodes under pod churn, beside the kubelets' Node status
# patches in the same run, and the descheduler's one filtered Event informer
# (docs/performance.md, "Watches at 5,000 nodes").
# Needs bin/etcd, bin/kube-apiserver and bin/kubectl (make tools).
#
#   AGENT_LOAD_NODES     comma-separated node counts (default 5000,15000)
#   AGENT_LOAD_RUN       the tests to run (default both: '^(TestAgentWriteLoad|TestWatchLoad)$')
#   WATCH_LOAD_NODES     TestWatchLoad's nodes and blocks (default 5000)
#   WATCH_LOAD_WATCHERS  its measured watcher counts (default 100,300)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
echo "load before: $(uptime)"
HEADROOM_AGENT_LOAD_NODES="${AGENT_LOAD_NODES:-5000,15000}" \
HEADROOM_WATCH_LOAD_NODES="${WATCH_LOAD_NODES:-}" \
HEADROOM_WATCH_LOAD_WATCHERS="${WATCH_LOAD_WATCHERS:-}" \
  go test -tags agentload ./test/agentload -run "${AGENT_LOAD_RUN:-^(TestAgentWriteLoad|TestWatchLoad)\$}" -count=1 -v -timeout 3h
echo "load after: $(uptime)"
