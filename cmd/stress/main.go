//go:build linux && cgo

// Command headroom-stress is the test workload of the end-to-end tests: it
// holds PIDs (child processes and threads) and memory on a node, reports
// every second what it holds and how many forks and clones failed, and
// keeps going when the PID budget is spent. See the usage text in flags.go
// and, for why the holding is C, hold.go.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"
)

func main() {
	// First, before the runtime has reason to start more threads: one P,
	// and no garbage collector (see hold.go).
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	os.Exit(run(os.Args[1:]))
}

// run returns the exit code: 0 when the holding ended by --hold or a
// signal, 2 for bad flags, 1 for a failure to set up.
func run(args []string) int {
	if err := installStop(); err != nil {
		fmt.Fprintln(os.Stderr, "headroom-stress:", err)
		return 1
	}
	o, err := parseFlags(args, machineMemory(), os.Stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "headroom-stress: %v (see --help)\n", err)
		return 2
	}
	if err := warmThreads(); err != nil {
		fmt.Fprintln(os.Stderr, "headroom-stress:", err)
		return 1
	}
	if err := hold(o); err != nil {
		fmt.Fprintln(os.Stderr, "headroom-stress:", err)
		return 1
	}
	return 0
}

// machineMemory is the machine's RAM and swap in bytes, 0 if unknown: the
// most --memory could ever hold.
func machineMemory() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	total := (uint64(si.Totalram) + uint64(si.Totalswap)) * uint64(si.Unit)
	if total > 1<<62 {
		return 0
	}
	return int64(total)
}
