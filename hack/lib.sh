# Sourced by hack/*.sh: paths and version helpers shared by the scripts.
HEADROOM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${BIN_DIR:-$HEADROOM_ROOT/bin}
# The Kubernetes release Headroom is built on, read from go.mod so there is one source.
K8S_VERSION=$(cd "$HEADROOM_ROOT" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
k8s_ldflags() {
  local v=$1 major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}
