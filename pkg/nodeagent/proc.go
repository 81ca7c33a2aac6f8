// Package nodeagent is the logic of headroom-node-agent: probes that each
// measure one figure of the node (its PID totals from /proc, its pods' PIDs
// from their cgroups) and one write policy that publishes them as Node
// annotations.
package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcSample is what the kubelet's pidlimit.Stats reads from /proc.
type ProcSample struct {
	// PIDMax is kernel.pid_max and ThreadsMax kernel.threads-max.
	PIDMax, ThreadsMax int64
	// Capacity is min(PIDMax, ThreadsMax): both are system-wide limits on
	// the number of tasks, and the kubelet takes the smaller as MaxPID.
	Capacity int64
	// Used is the number of tasks (threads) on the system: the total after
	// the slash in the fourth field of /proc/loadavg, which the kubelet
	// reports as NumOfRunningProcesses.
	Used int64
}

// ReadProc reads the three files the kubelet's pidlimit package reads, below
// procRoot instead of the fixed /proc. The shipped DaemonSet reads its own
// /proc, the host's in the host's PID namespace; a container can also read
// the host's /proc mounted elsewhere (e.g. /host/proc).
//
// It is stricter than the kubelet in two places, on purpose: the kubelet
// takes whichever of pid_max and threads-max it can read, and falls back to
// sysinfo(2) when /proc/loadavg is unreadable; ReadProc fails instead, so a
// half-mounted /proc is reported as an error rather than published.
func ReadProc(procRoot string) (ProcSample, error) {
	var s ProcSample
	var err error
	if s.PIDMax, err = readSysctl(filepath.Join(procRoot, "sys", "kernel", "pid_max")); err != nil {
		return ProcSample{}, err
	}
	if s.ThreadsMax, err = readSysctl(filepath.Join(procRoot, "sys", "kernel", "threads-max")); err != nil {
		return ProcSample{}, err
	}
	s.Capacity = min(s.PIDMax, s.ThreadsMax)
	if s.Used, err = readLoadavgTasks(filepath.Join(procRoot, "loadavg")); err != nil {
		return ProcSample{}, err
	}
	return s, nil
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	// The kernel writes the value followed by one newline.
	v := strings.TrimSuffix(string(b), "\n")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", path, v)
	}
	return n, nil
}

// readLoadavgTasks parses e.g. "1.36 3.49 4.53 2/3518 3715089" as the
// kubelet's runningTaskCount does and returns 3518.
func readLoadavgTasks(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	fields := strings.Fields(string(b))
	if len(fields) < 5 {
		return 0, fmt.Errorf("%s: %q has %d fields, want at least 5", path, string(b), len(fields))
	}
	sub := strings.Split(fields[3], "/")
	if len(sub) != 2 {
		return 0, fmt.Errorf("%s: fourth field %q is not running/total", path, fields[3])
	}
	n, err := strconv.ParseInt(sub[1], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: task total %q is not a non-negative integer", path, sub[1])
	}
	return n, nil
}
