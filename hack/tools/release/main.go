// Command release is the Go half of `make release` and `make push`
// (hack/release.sh, hack/push.sh):
//
//	release kubectl-plugin -version V -out DIR BINARY...
//	    krew archives of kubectl-headroom (one per os/arch, read from each
//	    binary's Go build information) and the krew plugin manifest
//	    DIR/plugins/headroom.yaml whose sha256s are the archives'
//	release sign -version V -revision COMMIT [-key cosign.key | -keyless [-fulcio-url URL] [-rekor-url URL]] DIR
//	    signs the release in DIR (Sigstore bundles, sigstore-go): each image
//	    index (cosign's signature and SLSA v1 provenance as its referrers),
//	    the chart and the krew archives (FILE.sigstore.json), and SLSA v1
//	    provenance of those files (provenance.sigstore.json). With a key it
//	    writes DIR/cosign.pub (without -key, a key pair of its own); with
//	    -keyless, a Fulcio certificate for the environment's OIDC identity
//	    (GitHub Actions' id-token) and every signature in Rekor
//	release checksums DIR
//	    DIR/SHA256SUMS over every other file under DIR (`sha256sum -c` reads it)
//	release verify [-platforms linux/amd64,linux/arm64] [-minors 1.35,1.36,1.37] [-certificate-identity-regexp RE -certificate-oidc-issuer URL [-trusted-root FILE]] DIR
//	    checks the release in DIR: DIR/SHA256SUMS (every file, and only
//	    those); each image archive images/MINOR/NAME.oci.tar (one image index
//	    ghcr.io/headroom-k8s/NAME:TAG of exactly -platforms, each platform's
//	    image a static binary of its machine with the release's labels and
//	    one SPDX SBOM that matches the binary; TAG that minor's,
//	    <Kubernetes release>-headroom.<Headroom version>, one Headroom
//	    version and the same images for every minor, and exactly -minors
//	    where given); the signatures and
//	    provenance against DIR/cosign.pub (offline) or, keyless, a
//	    certificate of that identity and issuer and a transparency log
//	    entry, against the trusted root (default Sigstore's public one,
//	    fetched through TUF); and the krew manifest
//	    plugins/headroom.yaml against the archives in kubectl-headroom/.
//	    It reports every problem, each naming its file, and exits 1
//	release push -registry HOST[:PORT]/PATH ARCHIVE.oci.tar...
//	    each image index of the OCI layout archives (hack/images index) to
//	    REGISTRY/NAME:TAG, and the SBOMs and signatures that refer to it
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release kubectl-plugin|sign|checksums|verify|push ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "kubectl-plugin":
		err = kubectlPluginMain(os.Args[2:])
	case "checksums":
		err = checksumsMain(os.Args[2:])
	case "verify":
		err = verifyMain(os.Args[2:])
	case "sign":
		err = signMain(os.Args[2:])
	case "push":
		err = pushMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want kubectl-plugin, sign, checksums, verify or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
