#!/usr/bin/env bash
# Regenerates deepcopy, conversion and defaulting code of the plugin args
# with the code generators of the pinned k8s.io/code-generator (bin/).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
"$HEADROOM_ROOT/hack/build-tools.sh" >/dev/null

header=hack/boilerplate.go.txt
deepcopy=(./apis/config ./apis/config/v1 ./plugins/relievenodepressure)
existing=()
for p in "${deepcopy[@]}"; do [[ -d $p ]] && existing+=("$p"); done

"$BIN_DIR/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go "${existing[@]}"
"$BIN_DIR/conversion-gen" --go-header-file "$header" --output-file zz_generated.conversion.go \
  --extra-peer-dirs k8s.io/apimachinery/pkg/apis/meta/v1 ./apis/config/v1
"$BIN_DIR/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go ./apis/config/v1
[[ -d plugins/relievenodepressure ]] && "$BIN_DIR/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go ./plugins/relievenodepressure
echo "generated code updated"
