package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/version/verflag"
)

// maxCount bounds --procs and --threads: far above any node's PID budget
// (pid_max is at most 4M, and a pod's budget is a small part of it), low
// enough that the bookkeeping for it is a few MiB.
const maxCount = 1 << 20

// options are the checked flags.
type options struct {
	procs, threads int64
	// memory is in bytes.
	memory     int64
	ramp, hold time.Duration
	// drain is how long a stop signal leaves it holding before it exits.
	drain time.Duration
}

const usage = `Usage: headroom-stress [--procs N] [--threads N] [--memory SIZE] [--ramp DURATION] [--hold DURATION] [--drain DURATION]

Holds PIDs and memory, as a test workload for node pressure: N single-threaded
child processes, N more threads of its own, SIZE bytes allocated and touched.
Every second it prints one line:

  procs=<held> threads=<held> failed=<failed clone/fork attempts so far> memory=<bytes held>

A fork or clone that fails (the cgroup's pids.max or the kernel's pid_max is
reached) is counted, not fatal: the missing ones are tried again every second.
It exits 0 when --hold is over or on SIGTERM or SIGINT (its children are
killed first), 2 on bad flags. With --drain, a stop signal is a graceful
shutdown: it prints "stop=SIGTERM drain_ms=<ms>" (or SIGINT), holds what it
holds for the drain without growing, prints "drained=SIGTERM" and exits 0;
killed before that, it never prints the second line.

Flags:
`

// parseFlags parses and checks the command line. machineMemory (RAM and
// swap, in bytes; 0 if unknown) bounds --memory. Usage and --help go to
// out.
func parseFlags(args []string, machineMemory int64, out io.Writer) (options, error) {
	var o options
	var memory string
	fs := pflag.NewFlagSet("headroom-stress", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
	fs.Int64Var(&o.procs, "procs", 0, fmt.Sprintf("single-threaded child processes to hold (at most %d)", maxCount))
	fs.Int64Var(&o.threads, "threads", 0, fmt.Sprintf("threads to hold in this process, besides the Go runtime's (at most %d)", maxCount))
	fs.StringVar(&memory, "memory", "0", "memory to allocate and touch, a Kubernetes quantity (e.g. 64Mi, 1.5Gi)")
	fs.DurationVar(&o.ramp, "ramp", 0, "spread the start of the processes and threads, and the growth of the memory (in 1 MiB steps), evenly over this time (0: all at once)")
	fs.DurationVar(&o.hold, "hold", 0, "exit 0 this long after the start (0: hold until killed)")
	fs.DurationVar(&o.drain, "drain", 0, "on SIGTERM or SIGINT, keep holding this long before exiting 0, as a graceful shutdown does, printing a line at its start and end (0: exit at once)")
	verflag.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	verflag.PrintAndExitIfRequested()
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	for _, c := range []struct {
		flag string
		n    int64
	}{{"--procs", o.procs}, {"--threads", o.threads}} {
		if c.n < 0 {
			return o, fmt.Errorf("%s %d: must not be negative", c.flag, c.n)
		}
		if c.n > maxCount {
			return o, fmt.Errorf("%s %d: more than %d", c.flag, c.n, maxCount)
		}
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"--ramp", o.ramp}, {"--hold", o.hold}, {"--drain", o.drain}} {
		if d.d < 0 {
			return o, fmt.Errorf("%s %v: must not be negative", d.flag, d.d)
		}
	}
	q, err := resource.ParseQuantity(memory)
	if err != nil {
		return o, fmt.Errorf("--memory %q: %w", memory, err)
	}
	if q.Sign() < 0 {
		return o, fmt.Errorf("--memory %s: must not be negative", memory)
	}
	// ParseQuantity clamps what does not fit to MaxInt64 (binary suffixes)
	// or keeps it exact (decimal ones): either way it is no amount to hold.
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) >= 0 {
		return o, fmt.Errorf("--memory %s: does not fit in %d bytes", memory, int64(math.MaxInt64))
	}
	// Value rounds a fraction of a byte up.
	o.memory = q.Value()
	if machineMemory > 0 && o.memory > machineMemory {
		return o, fmt.Errorf("--memory %s: more than this machine's memory and swap (%d bytes)", memory, machineMemory)
	}
	return o, nil
}
