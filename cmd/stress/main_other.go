//go:build !linux || !cgo

// Command headroom-stress is the test workload of the end-to-end tests.
// Its holding of threads and processes is C through cgo and Linux's
// process interfaces (see hold.go): elsewhere it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "headroom-stress: runs on Linux only, and needs cgo (CGO_ENABLED=1)")
	os.Exit(1)
}
