#!/usr/bin/env bash
# Keeps the Helm chart (manifests/charts/headroom) in step with the kustomize
# tree it mirrors:
# - files/ gets the configuration files the manifests ship (Helm's .Files
#   reads only inside the chart): the scheduler config, the descheduler
#   policy, the admission policies (the node agent's, the one on the
#   kubelet's FailedCreatePodSandBox Events, the namespace opt-in's
#   MutatingAdmissionPolicy, and the scheduler's and
#   descheduler's on their Leases), the Prometheus rules and the
#   Grafana dashboard;
# - Chart.yaml's version and appVersion: the release in VERSION, or, without
#   that file, the Kubernetes release hack/lib.sh reports; appVersion (the
#   image tag the chart defaults to) is the tag kustomize gives Headroom's
#   images, so both install paths pull the same images;
# - the alerts' runbook_url (and the promtool tests' copies of it): the
#   troubleshooting page at that same tag, the release's, which the chart's
#   prometheusRule.runbookBaseURL defaults to as well.
# The templates themselves are held to `kubectl kustomize manifests/` object
# by object by test/integration/chart_test.go.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
chart=manifests/charts/headroom

if [[ -f VERSION ]]; then version=$(tr -d '[:space:]' <VERSION); else version=$K8S_VERSION; fi
[[ -x $BIN_DIR/kubectl ]] || "$HEADROOM_ROOT/hack/build-tools.sh" >/dev/null
tags=$("$BIN_DIR/kubectl" kustomize manifests/ |
  sed -n 's#^ *image: .*/headroom-\(scheduler\|descheduler\|node-agent\):\([^ @]*\).*#\2#p' | sort -u)
if [[ $(wc -l <<<"$tags") -ne 1 || -z $tags ]]; then
  echo "kubectl kustomize manifests/ tags Headroom's images with '${tags//$'\n'/, }': want one tag" >&2
  exit 1
fi
sed -i -e "s/^version: .*/version: ${version#v}/" -e "s/^appVersion: .*/appVersion: \"$tags\"/" "$chart/Chart.yaml"
sed -i "s|\(https://github.com/headroom-k8s/headroom/blob/\)[^/]*\(/docs/troubleshooting.md#\)|\1$tags\2|" \
  manifests/monitoring/prometheus-rules.yaml test/prometheus/rules-test.yaml

mkdir -p "$chart/files"
cp manifests/scheduler/scheduler-config.yaml "$chart/files/scheduler-config.yaml"
cp manifests/descheduler/policy.yaml "$chart/files/descheduler-policy.yaml"
cp manifests/node-agent/admission-policy.yaml "$chart/files/node-agent-admission-policy.yaml"
cp manifests/kubelet-events/admission-policy.yaml "$chart/files/kubelet-events-admission-policy.yaml"
cp manifests/namespace-opt-in/mutating-admission-policy.yaml "$chart/files/namespace-opt-in-policy.yaml"
cp manifests/scheduler/leader-election-policy.yaml "$chart/files/scheduler-leader-election-policy.yaml"
cp manifests/descheduler-deployment/leader-election-policy.yaml "$chart/files/descheduler-leader-election-policy.yaml"
cp manifests/monitoring/prometheus-rules.yaml "$chart/files/prometheus-rules.yaml"
cp manifests/grafana/headroom-dashboard.json "$chart/files/headroom-dashboard.json"
echo "chart updated: version ${version#v}, appVersion $tags"
