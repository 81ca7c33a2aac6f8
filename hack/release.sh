#!/usr/bin/env bash
# make release: a release's artifacts in bin/release/ (docs/release.md):
#   images/MINOR/NAME.oci.tar
#                         for every Kubernetes minor Headroom ships
#                         (hack/k8s-minors.txt), headroom-scheduler,
#                         headroom-descheduler and headroom-node-agent built
#                         for it, tagged with its tag (<Kubernetes release>-
#                         headroom.<VERSION>): each an OCI image layout (tar)
#                         whose image index holds linux/amd64 and linux/arm64,
#                         each platform's image with an SPDX SBOM of its binary
#                         as an OCI referrer (hack/images index)
#   headroom-VERSION.tgz  the Helm chart (helm package)
#   kubectl-headroom/     kubectl-headroom for linux, darwin and windows on
#                         amd64 and arm64, as krew archives
#   plugins/headroom.yaml the krew plugin manifest, with the archives' sha256s
#   cosign.pub            the public key of the release's signatures: each image
#                         index has a Sigstore bundle of its signature and one of
#                         its SLSA provenance as OCI referrers; the chart and each
#                         krew archive a bundle FILE.sigstore.json beside it;
#                         provenance.sigstore.json covers those files
#   SHA256SUMS            the SHA-256 of every file above (sha256sum -c)
# and then checks it all offline (hack/tools/release verify): the checksums,
# the signatures and provenance, each image's platforms, labels, binary and
# SBOM, the krew archives against the manifest. Nothing is downloaded but Go
# modules; no container engine.
#
# Environment (the defaults make the full release):
#   RELEASE_DIR                  output directory (emptied first), default bin/release
#   RELEASE_MINORS               the minors whose images to build, default every
#                                shipped one of hack/k8s-minors.txt
#   RELEASE_IMAGES               images to build, default all three
#   RELEASE_PLATFORMS            the images' platforms, default "linux/amd64 linux/arm64"
#   RELEASE_KUBECTL_PLATFORMS    kubectl-headroom's, default the six above; "" for none
#   RELEASE_DOWNLOAD_URL         where the krew archives are published, default
#                                the GitHub release of the version
#   RELEASE_SIGNING_KEY          a cosign private key (cosign generate-key-pair,
#                                its password in COSIGN_PASSWORD) to sign with;
#                                default: a new key pair for this release alone,
#                                its private key never written
#   RELEASE_KEYLESS=true         sign keyless instead of with a key: an OIDC
#                                identity (GitHub Actions' id-token), a Fulcio
#                                certificate, every signature in Rekor; no
#                                cosign.pub. RELEASE_FULCIO_URL,
#                                RELEASE_REKOR_URL and, for the check at the
#                                end, RELEASE_CERTIFICATE_IDENTITY_REGEXP,
#                                RELEASE_CERTIFICATE_OIDC_ISSUER and
#                                RELEASE_TRUSTED_ROOT: hack/lib.sh,
#                                release_keyless_flags
#   RELEASE_BUILDER_ID           the provenance's builder.id, default
#                                https://github.com/headroom-k8s/headroom/hack/release.sh
#   RELEASE_PREBUILT             a directory of binaries built already, as
#                                MINOR/OS_ARCH/NAME (kubectl-headroom: the
#                                default minor's): taken instead of building
#                                them (hack/tools/release's test reuses bin/
#                                with it)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"

out=${RELEASE_DIR:-$BIN_DIR/release}
images=${RELEASE_IMAGES-headroom-scheduler headroom-descheduler headroom-node-agent}
platforms=${RELEASE_PLATFORMS-linux/amd64 linux/arm64}
kubectl_platforms=${RELEASE_KUBECTL_PLATFORMS-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}

shipped=$(shipped_minors)
minors=${RELEASE_MINORS-$(awk '{ print $1 }' <<<"$shipped")}
default_minor=$(awk '$3 == "default" { print $1 }' <<<"$shipped")

release_keyless_flags
for p in $platforms; do
  [[ $p == linux/* ]] || { echo "RELEASE_PLATFORMS: $p: the images hold linux binaries" >&2; exit 1; }
done
for m in $minors; do
  awk -v m="$m" '$1 == m { found = 1 } END { exit !found }' <<<"$shipped" ||
    { echo "RELEASE_MINORS: $m is not a minor hack/k8s-minors.txt ships: $(awk '{ print $1 }' <<<"$shipped" | xargs)" >&2; exit 1; }
done
started=$(date -u +%FT%TZ)
ldflags=$(headroom_ldflags)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
# A checkout with changes is not the commit the labels name: say so.
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then
  echo "hack/release.sh: warning: the work tree has changes; the images' revision label names $revision" >&2
fi

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd) # release_tool runs in hack/tools/release
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

# minor_binaries MINOR OS/ARCH: the directory of that minor's binaries for
# the platform: RELEASE_PREBUILT/MINOR/OS_ARCH where it holds every image's
# binary, else what hack/build.sh builds (MINOR=<minor> for every minor but
# the default, whose build is the plain one) into $build, as make build
# builds them.
minor_binaries() {
  local minor=$1 goos=${2%/*} goarch=${2#*/} dir image
  dir=${RELEASE_PREBUILT:+$RELEASE_PREBUILT/$minor/${goos}_$goarch}
  if [[ -n $dir ]]; then
    for image in $images; do [[ -f $dir/$image ]] || dir=; done
    if [[ -n $dir ]]; then
      echo ">> $minor $2: $dir" >&2
      echo "$dir"
      return
    fi
  fi
  dir=$build/$minor/${goos}_$goarch
  echo ">> $minor $2: hack/build.sh" >&2
  if [[ $minor == "$default_minor" ]]; then
    BIN_DIR=$dir GOOS=$goos GOARCH=$goarch hack/build.sh >&2
  else
    BIN_DIR=$dir GOOS=$goos GOARCH=$goarch MINOR=$minor hack/build.sh >&2
    dir=$dir/minors/$minor
  fi
  echo "$dir"
}

# The images of each minor: one binary per platform, then one image index
# per binary, tagged with the minor's tag.
for image in $images; do
  case $image in
    headroom-scheduler | headroom-descheduler | headroom-node-agent) ;;
    *) echo "RELEASE_IMAGES: unknown image $image" >&2; exit 1 ;;
  esac
done
if [[ -n $images ]]; then
  for minor in $minors; do
    tag=$(minor_tag "$(awk -v m="$minor" '$1 == m { print $2 }' <<<"$shipped")")
    binaries=()
    for p in $platforms; do
      dir=$(minor_binaries "$minor" "$p")
      for image in $images; do
        [[ -x $dir/$image ]] || { echo "hack/release.sh: no $dir/$image" >&2; exit 1; }
        binaries+=("$dir/$image")
      done
    done
    go run ./hack/images index -out "$out/images/$minor" -version "$tag" \
      -revision "$revision" -created "$created" "${binaries[@]}"
    # A minor's binaries (about 300 MB per platform) are in its images now;
    # the default minor's stay for kubectl-headroom's archives below.
    [[ $minor == "$default_minor" ]] || rm -rf "${build:?}/$minor"
  done
fi

# gobuild OS/ARCH CMD OUT: one static binary of the default minor, as
# hack/build.sh builds it, into $build/OS_ARCH/OUT; or the one
# RELEASE_PREBUILT or the images' build above holds.
gobuild() {
  local goos=${1%/*} goarch=${1#*/} dir
  for dir in ${RELEASE_PREBUILT:+"$RELEASE_PREBUILT/$default_minor/${goos}_$goarch"} "$build/$default_minor/${goos}_$goarch"; do
    if [[ -f $dir/$3 ]]; then
      echo ">> $3 ($1): $dir/$3"
      mkdir -p "$build/${goos}_$goarch" && cp "$dir/$3" "$build/${goos}_$goarch/$3"
      return
    fi
  done
  echo ">> $3 ($1)"
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -tags grpcnotrace -ldflags "$ldflags" -o "$build/${goos}_$goarch/$3" "./cmd/$2"
}

# The chart, as it is in the repository (hack/update-chart.sh keeps its
# version and appVersion; hack/verify.sh checks that).
[[ -x $BIN_DIR/helm ]] || hack/build-tools.sh >/dev/null
"$BIN_DIR/helm" package manifests/charts/headroom --destination "$out"

# kubectl-headroom, a krew archive per platform, and the krew manifest.
plugin=()
for p in $kubectl_platforms; do
  exe=kubectl-headroom
  [[ $p == windows/* ]] && exe+=.exe
  gobuild "$p" kubectl-headroom "$exe"
  plugin+=("$build/${p%/*}_${p#*/}/$exe")
done
release_tool() { (cd hack/tools/release && go run . "$@"); }
if ((${#plugin[@]})); then
  release_tool kubectl-plugin -out "$out" -version "$HEADROOM_VERSION" -created "$created" \
    ${RELEASE_DOWNLOAD_URL:+-download-url "$RELEASE_DOWNLOAD_URL"} \
    -extra "$HEADROOM_ROOT/LICENSE,$HEADROOM_ROOT/cmd/kubectl-headroom/kubectl_complete-headroom" "${plugin[@]}"
fi

# Sign it all (images, chart, krew archives) and attach SLSA provenance,
# with RELEASE_SIGNING_KEY, a key pair of this release's own, or keyless.
release_tool sign -version "$HEADROOM_VERSION" -revision "$revision" -started "$started" \
  ${RELEASE_BUILDER_ID:+-builder-id "$RELEASE_BUILDER_ID"} \
  ${RELEASE_SIGNING_KEY:+-key "$(cd "$(dirname "$RELEASE_SIGNING_KEY")" && pwd)/$(basename "$RELEASE_SIGNING_KEY")"} \
  "${keyless_sign[@]}" "$out"
release_tool checksums "$out"
# The release as a user gets it: every image of exactly $platforms, for
# exactly $minors, signed as it was signed.
release_tool verify -platforms "${platforms// /,}" -minors "$(xargs <<<"$minors" | tr ' ' ,)" "${keyless_verify[@]}" "$out"
