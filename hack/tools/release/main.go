// Command release is the Go half of `make release` and `make push`
// (hack/release.sh, hack/push.sh):
//
//	release kubectl-plugin -version V -out DIR BINARY...
//	    krew archives of kubectl-headroom (one per os/arch, read from each
//	    binary's Go build information) and the krew plugin manifest
//	    DIR/plugins/headroom.yaml whose sha256s are the archives'
//	release checksums DIR
//	    DIR/SHA256SUMS over every other file under DIR (`sha256sum -c` reads it)
//	release verify [-platforms linux/amd64,linux/arm64] DIR
//	    checks the release in DIR offline: DIR/SHA256SUMS (every file, and
//	    only those); each image archive images/NAME.oci.tar (one image index
//	    ghcr.io/headroom-k8s/NAME:TAG of exactly -platforms, each platform's
//	    image a static binary of its machine with the release's labels and
//	    one SPDX SBOM that matches the binary); and the krew manifest
//	    plugins/headroom.yaml against the archives in kubectl-headroom/.
//	    It reports every problem, each naming its file, and exits 1
//	release push -registry HOST[:PORT]/PATH ARCHIVE.oci.tar...
//	    each image index of the OCI layout archives (hack/images index) to
//	    REGISTRY/NAME:TAG, and the SBOMs that refer to its images
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release kubectl-plugin|checksums|verify|push ...")
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
		err = fmt.Errorf("unknown command %q: want kubectl-plugin, checksums, verify or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
