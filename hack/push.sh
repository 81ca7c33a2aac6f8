#!/usr/bin/env bash
# make push REGISTRY=HOST[:PORT]/PATH: pushes what make release wrote to
# bin/release/ (docs/release.md):
# - each image index to REGISTRY/NAME:VERSION, and the SBOMs that refer to
#   its images and its signature and provenance bundles, by digest
#   (go-containerregistry: hack/tools/release push);
#   credentials from the docker config (docker login, or ~/.docker/config.json);
# - the chart to oci://REGISTRY/headroom:CHART_VERSION (helm push; credentials
#   from helm registry login).
# A loopback registry (localhost, 127.0.0.0/8, [::1]) is spoken to over
# plain HTTP, as go-containerregistry does; PLAIN_HTTP=true says so for
# another one.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"

registry=${REGISTRY:-}
if [[ -z $registry ]]; then
  echo "make push needs a registry: make push REGISTRY=HOST[:PORT]/PATH (e.g. REGISTRY=ghcr.io/headroom-k8s)" >&2
  exit 2
fi
registry=${registry%/}
out=${RELEASE_DIR:-$BIN_DIR/release}
[[ -d $out ]] && out=$(cd "$out" && pwd) # release_tool runs in hack/tools/release
shopt -s nullglob
archives=("$out"/images/*/*.oci.tar)
charts=("$out"/headroom-*.tgz)
if ((${#archives[@]} == 0 && ${#charts[@]} == 0)); then
  echo "$out holds no image archives (images/<minor>/*.oci.tar) and no chart (headroom-*.tgz): run make release first" >&2
  exit 1
fi
release_tool() { (cd hack/tools/release && go run . "$@"); }
# What is pushed is what was checksummed, and what release verify passes:
# every image of the platforms make release built (RELEASE_PLATFORMS).
# Signed as make release signed it: a keyless release (RELEASE_KEYLESS=true)
# by the identity release_keyless_flags names.
platforms=${RELEASE_PLATFORMS-linux/amd64 linux/arm64}
release_keyless_flags
release_tool verify -platforms "${platforms// /,}" "${keyless_verify[@]}" "$out"

plain_http=${PLAIN_HTTP:-false}
host=${registry%%/*}
case $host in
  localhost | localhost:* | 127.* | \[::1\] | \[::1\]:*) plain_http=true ;;
esac

if ((${#archives[@]})); then
  release_tool push -registry "$registry" -plain-http="$plain_http" "${archives[@]}"
fi
[[ -x $BIN_DIR/helm ]] || hack/build-tools.sh >/dev/null
for chart in "${charts[@]}"; do
  flags=()
  [[ $plain_http == true ]] && flags+=(--plain-http)
  "$BIN_DIR/helm" push "$chart" "oci://$registry" "${flags[@]}"
done
