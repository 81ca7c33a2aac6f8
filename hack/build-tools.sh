#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl, kwok), host-local, the code generators and helm into bin/ from the
# pinned versions in hack/tools/go.mod (helm: hack/tools/helm/go.mod), through
# the Go module proxy only. A tool already built from the same go.mod and go.sum
# is skipped, so a warm run costs nothing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
mkdir -p "$BIN_DIR"
cd "$HEADROOM_ROOT/hack/tools"

stamp=$(cat go.mod go.sum etcd/main.go | sha256sum | cut -c1-16)
ldflags=$(k8s_ldflags "$K8S_VERSION")

build() { # name package
  local name=$1 pkg=$2
  if [[ -x $BIN_DIR/$name && "$(cat "$BIN_DIR/.$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
    return
  fi
  echo ">> building $name ($pkg)"
  go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/$name" "$pkg"
  echo "$stamp" >"$BIN_DIR/.$name.stamp"
}

build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kubectl k8s.io/kubernetes/cmd/kubectl
build kwok sigs.k8s.io/kwok/cmd/kwok
build host-local github.com/containernetworking/plugins/plugins/ipam/host-local # CNI IPAM the tests drive
build deepcopy-gen k8s.io/code-generator/cmd/deepcopy-gen
build conversion-gen k8s.io/code-generator/cmd/conversion-gen
build defaulter-gen k8s.io/code-generator/cmd/defaulter-gen

# kwok's node and pod lifecycle stages, shipped in its module.
stages=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
for f in "$stages"/node/fast/*.yaml "$stages"/node/heartbeat/node-heartbeat.yaml "$stages"/pod/fast/pod-*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] && continue
  echo "---"; cat "$f"
done >"$BIN_DIR/kwok-stages.yaml"

# Helm, from its own module (hack/tools/helm), so that its dependencies never
# move the versions the control plane above is built with.
cd "$HEADROOM_ROOT/hack/tools/helm"
stamp=$(cat go.mod go.sum | sha256sum | cut -c1-16)
build helm helm.sh/helm/v4/cmd/helm
