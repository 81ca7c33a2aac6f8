#!/usr/bin/env bash
# Regenerates deepcopy, conversion and defaulting code of the plugin args
# with the code generators of the pinned k8s.io/code-generator (bin/).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
"$HEADROOM_ROOT/hack/build-tools.sh" >/dev/null

header=hack/boilerplate.go.txt
"$BIN_DIR/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  ./apis/config ./apis/config/v1 ./apis/kubectl/v1alpha1 ./plugins/relievenodepressure
"$BIN_DIR/conversion-gen" --go-header-file "$header" --output-file zz_generated.conversion.go \
  --extra-peer-dirs k8s.io/apimachinery/pkg/apis/meta/v1 ./apis/config/v1
"$BIN_DIR/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go ./apis/config/v1
# The descheduler calls plugins' defaulters itself (PluginArgDefaulter), so
# RelieveNodePressureArgs needs deepcopy only.
echo "generated code updated"
