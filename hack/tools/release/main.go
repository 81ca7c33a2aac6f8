// Command release is the Go half of `make release` and `make push`
// (hack/release.sh, hack/push.sh):
//
//	release kubectl-plugin -version V -out DIR BINARY...
//	    krew archives of kubectl-headroom (one per os/arch, read from each
//	    binary's Go build information) and the krew plugin manifest
//	    DIR/plugins/headroom.yaml whose sha256s are the archives'
//	release checksums DIR
//	    DIR/SHA256SUMS over every other file under DIR (`sha256sum -c` reads it)
//	release verify DIR
//	    checks DIR against DIR/SHA256SUMS, and that it lists every file
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
		if len(os.Args) != 3 {
			err = fmt.Errorf("want one directory")
		} else {
			err = VerifyChecksums(os.Args[2])
		}
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
