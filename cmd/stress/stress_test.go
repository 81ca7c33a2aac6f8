//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run the real binary: what they check (threads and processes
// the kernel sees, a cgroup's pids.max refusing clones, signals) is
// nothing an in-process call could show.

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "headroom-stress-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary builds headroom-stress once, with cgo (the holding is C), and
// returns its path.
func binary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(binDir, "headroom-stress")
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", path, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return path
}

// requireEnv skips a test whose environment lacks something (root, the
// pids cgroup), except in CI (CI=true), where it must not go unnoticed.
func requireEnv(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: this test must run)", msg)
	}
	t.Skip(msg)
}

// status is one line of output.
type status struct {
	procs, threads, failed, memory int64
	at                             time.Time
}

var lineRE = regexp.MustCompile(`^procs=(\d+) threads=(\d+) failed=(\d+) memory=(\d+)$`)

func parseStatus(line string) (status, error) {
	m := lineRE.FindStringSubmatch(line)
	if m == nil {
		return status{}, fmt.Errorf("line %q is not procs=N threads=N failed=N memory=N", line)
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil {
			return status{}, err
		}
		n[i] = v
	}
	return status{procs: n[0], threads: n[1], failed: n[2], memory: n[3]}, nil
}

func (s status) String() string {
	return fmt.Sprintf("procs=%d threads=%d failed=%d memory=%d", s.procs, s.threads, s.failed, s.memory)
}

// stress is a running headroom-stress.
type stress struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr bytes.Buffer
	done   chan struct{} // closed when the process has been waited for
	err    error         // Wait's result, once done is closed

	mu   sync.Mutex
	seen map[int]string // children seen: PID → start time, to tell them from a reused PID
}

// start runs headroom-stress with args, through prefix (a command that ends
// by exec'ing the rest) if given. When the test ends it is stopped with
// SIGTERM (SIGKILL if that fails) and every child it had is checked gone.
func start(t *testing.T, prefix []string, args ...string) *stress {
	t.Helper()
	argv := append(append(append([]string{}, prefix...), binary(t)), args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &stress{t: t, lines: make(chan string, 1024), done: make(chan struct{}), seen: map[int]string{}}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stdout = w
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatal(err)
	}
	w.Close()
	go func() {
		defer close(s.lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		if !s.exited() {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				t.Errorf("headroom-stress did not exit on SIGTERM; killing it")
				s.cmd.Process.Kill()
				<-s.done
			}
		}
		s.checkChildrenGone(10 * time.Second)
	})
	return s
}

func (s *stress) pid() int { return s.cmd.Process.Pid }

func (s *stress) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// next returns the next status line, failing the test on a malformed
// line, an exit or timeout.
func (s *stress) next(timeout time.Duration) status {
	s.t.Helper()
	select {
	case line, ok := <-s.lines:
		if !ok {
			<-s.done
			s.t.Fatalf("headroom-stress exited (%v) while a status line was awaited; stderr:\n%s", s.err, s.stderr.String())
		}
		st, err := parseStatus(line)
		if err != nil {
			s.t.Fatal(err)
		}
		st.at = time.Now()
		return st
	case <-time.After(timeout):
		s.t.Fatalf("no status line within %v", timeout)
	}
	panic("unreachable")
}

// waitFor reads status lines until one satisfies ok.
func (s *stress) waitFor(what string, timeout time.Duration, ok func(status) bool) status {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last status
	for time.Now().Before(deadline) {
		last = s.next(time.Until(deadline) + 10*time.Millisecond)
		if ok(last) {
			return last
		}
	}
	s.t.Fatalf("no status line with %s within %v; last: %v", what, timeout, last)
	return last
}

// wait waits for the process to exit and returns its exit code.
func (s *stress) wait(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.t.Fatalf("headroom-stress still running after %v", timeout)
	}
	var ee *exec.ExitError
	switch {
	case s.err == nil:
		return 0
	case errors.As(s.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.t.Fatalf("headroom-stress died of %v; stderr:\n%s", ws.Signal(), s.stderr.String())
		}
		return ee.ExitCode()
	default:
		s.t.Fatal(s.err)
		return -1
	}
}

// children lists the process's children (PID → start time) and remembers
// them for the final check.
func (s *stress) children() map[int]string {
	s.t.Helper()
	kids := map[int]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != s.pid() {
			continue
		}
		kids[pid] = st.start
	}
	s.mu.Lock()
	for pid, start := range kids {
		s.seen[pid] = start
	}
	s.mu.Unlock()
	return kids
}

// checkChildrenGone fails the test if a child seen earlier is still alive
// after timeout: a dead one reparented to an init that has not reaped it yet
// (state Z) counts as gone.
func (s *stress) checkChildrenGone(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, start := range s.seen {
		for {
			st, err := readStat(pid)
			if err != nil || st.start != start || st.state == "Z" {
				break
			}
			if time.Now().After(deadline) {
				s.t.Errorf("child %d (state %s) outlived headroom-stress; killing it", pid, st.state)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// procStat holds the fields of /proc/PID/stat the tests use.
type procStat struct {
	state string
	ppid  int
	start string
}

func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, err
	}
	// Fields 3 (state), 4 (ppid) and 22 (starttime) of proc(5).
	return procStat{state: f[0], ppid: ppid, start: f[19]}, nil
}

// statusField reads one number (the first word after "Name:") from
// /proc/PID/status.
func statusField(t *testing.T, pid int, name string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, name, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, name)
	return 0
}

// heldThreads counts the threads of pid named as held threads.
func heldThreads(t *testing.T, pid int) int64 {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, task := range tasks {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, task.Name()))
		if err == nil && strings.TrimSpace(string(comm)) == "stress-thread" {
			n++
		}
	}
	return n
}

// checkHeld checks that what the kernel shows of the process matches a
// status line: its children, each single-threaded, and its held threads.
func (s *stress) checkHeld(st status) {
	s.t.Helper()
	kids := s.children()
	if int64(len(kids)) != st.procs {
		s.t.Errorf("%d children, the line says procs=%d", len(kids), st.procs)
	}
	for pid := range kids {
		if n := statusField(s.t, pid, "Threads"); n != 1 {
			s.t.Errorf("child %d has %d threads, want 1", pid, n)
		}
	}
	if n := heldThreads(s.t, s.pid()); n != st.threads {
		s.t.Errorf("%d held threads, the line says threads=%d", n, st.threads)
	}
	// The rest are the Go runtime's: a handful with GOMAXPROCS 1.
	threads := statusField(s.t, s.pid(), "Threads")
	if rt := threads - st.threads; rt < 1 || rt > 12 {
		s.t.Errorf("Threads: %d with threads=%d: %d of the runtime's, want 1 to 12", threads, st.threads, rt)
	}
}

func TestHoldsProcsAndThreads(t *testing.T) {
	t.Parallel()
	s := start(t, nil, "--procs", "5", "--threads", "7")
	st := s.waitFor("procs=5 threads=7", 15*time.Second, func(st status) bool { return st.procs == 5 && st.threads == 7 })
	if st.failed != 0 || st.memory != 0 {
		t.Errorf("%v, want failed=0 memory=0", st)
	}
	s.checkHeld(st)
	// Held, and one line a second.
	prev := st
	for range 3 {
		next := s.next(5 * time.Second)
		if next.procs != 5 || next.threads != 7 || next.failed != 0 {
			t.Errorf("%v after %v", next, prev)
		}
		if gap := next.at.Sub(prev.at); gap < 300*time.Millisecond || gap > 3*time.Second {
			t.Errorf("%v between two lines, want about a second", gap)
		}
		prev = next
	}
	s.checkHeld(prev)
}

func TestRamp(t *testing.T) {
	t.Parallel()
	s := start(t, nil, "--procs", "4", "--threads", "4", "--ramp", "2s")
	first := s.next(10 * time.Second)
	if first.procs >= 4 || first.threads >= 4 {
		t.Errorf("first line %v: a 2s ramp holds less than all at the start", first)
	}
	prev := first
	last := s.waitFor("procs=4 threads=4", 15*time.Second, func(st status) bool {
		if st.procs < prev.procs || st.threads < prev.threads {
			t.Errorf("%v after %v: a ramp only grows", st, prev)
		}
		prev = st
		return st.procs == 4 && st.threads == 4
	})
	if d := last.at.Sub(first.at); d < time.Second {
		t.Errorf("all held %v after the first line, want the ramp's 2s spread over it", d)
	}
	s.checkHeld(last)
}

func TestMemory(t *testing.T) {
	t.Parallel()
	const want = 64 << 20
	s := start(t, nil, "--memory", "64Mi")
	st := s.waitFor("memory=67108864", 15*time.Second, func(st status) bool { return st.memory == want })
	if st.procs != 0 || st.threads != 0 || st.failed != 0 {
		t.Errorf("%v, want nothing but memory held", st)
	}
	if rss := statusField(t, s.pid(), "VmRSS") * 1024; rss < want {
		t.Errorf("VmRSS %d bytes, want at least %d", rss, want)
	}
}

// TestMemoryRamp: over --ramp memory grows a step at a time, as the
// CHANGELOG and --help say, so that a pod's working set climbs the way a
// leak's does instead of jumping.
func TestMemoryRamp(t *testing.T) {
	t.Parallel()
	const want = 48 << 20
	s := start(t, nil, "--memory", "48Mi", "--ramp", "3s")
	first := s.next(10 * time.Second)
	if first.memory >= want {
		t.Errorf("first line %v: a 3s ramp holds less than all at the start", first)
	}
	prev, between := first, 0
	last := s.waitFor("memory=50331648", 15*time.Second, func(st status) bool {
		if st.memory < prev.memory {
			t.Errorf("%v after %v: a ramp only grows", st, prev)
		}
		if st.memory > 0 && st.memory < want {
			between++
			if st.memory%(1<<20) != 0 {
				t.Errorf("%v: memory held before the end of the ramp is not whole MiB steps", st)
			}
		}
		prev = st
		return st.memory == want
	})
	if between == 0 {
		t.Errorf("no line between %v and %v: the ramp did not spread the memory", first, last)
	}
	if d := last.at.Sub(first.at); d < time.Second {
		t.Errorf("all held %v after the first line, want the ramp's 3s spread over it", d)
	}
	if rss := statusField(t, s.pid(), "VmRSS") * 1024; rss < want {
		t.Errorf("VmRSS %d bytes, want at least %d", rss, want)
	}
}

func TestStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			s := start(t, nil, "--procs", "3", "--threads", "3", "--memory", "8Mi")
			s.waitFor("everything held", 15*time.Second, func(st status) bool {
				return st.procs == 3 && st.threads == 3 && st.memory == 8<<20
			})
			kids := s.children()
			if len(kids) != 3 {
				t.Fatalf("%d children, want 3", len(kids))
			}
			sent := time.Now()
			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := s.wait(10 * time.Second); code != 0 {
				t.Errorf("exit code %d on %v, want 0; stderr:\n%s", code, sig, s.stderr.String())
			}
			if d := time.Since(sent); d > 3*time.Second {
				t.Errorf("exited %v after %v, want promptly", d, sig)
			}
			// It kills and reaps its children itself before it exits.
			for pid, start := range kids {
				if st, err := readStat(pid); err == nil && st.start == start {
					t.Errorf("child %d still there (state %s) after headroom-stress exited", pid, st.state)
				}
			}
		})
	}
}

// TestDrain: with --drain, a stop signal is announced, what is held stays
// held for the drain, the end is announced and the exit is 0; a SIGKILL
// within the drain leaves the announcement without its end, which is how
// a pod's log tells a graceful shutdown from one cut short.
func TestDrain(t *testing.T) {
	const drain = 2 * time.Second
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("killed within the drain %t", cut), func(t *testing.T) {
			t.Parallel()
			s := start(t, nil, "--procs", "2", "--threads", "2", "--drain", drain.String())
			s.waitFor("everything held", 15*time.Second, func(st status) bool { return st.procs == 2 && st.threads == 2 })
			kids := s.children()
			sent := time.Now()
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			s.waitLine("stop=SIGTERM drain_ms=2000", 5*time.Second)
			// Held through the drain: the children are still there.
			for pid, start := range kids {
				if st, err := readStat(pid); err != nil || st.start != start {
					t.Errorf("child %d gone within the drain", pid)
				}
			}
			if cut {
				if err := s.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				<-s.done
				for line := range s.lines {
					if strings.HasPrefix(line, "drained=") {
						t.Errorf("%q printed by a process killed within its drain", line)
					}
				}
				return
			}
			s.waitLine("drained=SIGTERM", 5*time.Second)
			if d := time.Since(sent); d < drain {
				t.Errorf("drained %v after SIGTERM, want at least the drain %v", d, drain)
			}
			if code := s.wait(5 * time.Second); code != 0 {
				t.Errorf("exit code %d after the drain, want 0; stderr:\n%s", code, s.stderr.String())
			}
		})
	}
}

// waitLine reads lines, status lines among them, until want.
func (s *stress) waitLine(want string, timeout time.Duration) {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("output ended without %q", want)
			}
			if line == want {
				return
			}
		case <-deadline:
			s.t.Fatalf("no line %q within %v", want, timeout)
		}
	}
}

func TestHoldExpires(t *testing.T) {
	t.Parallel()
	s := start(t, nil, "--procs", "2", "--threads", "2", "--hold", "1500ms")
	s.waitFor("procs=2 threads=2", 10*time.Second, func(st status) bool { return st.procs == 2 && st.threads == 2 })
	kids := s.children()
	if code := s.wait(15 * time.Second); code != 0 {
		t.Errorf("exit code %d after --hold, want 0; stderr:\n%s", code, s.stderr.String())
	}
	for pid, start := range kids {
		if st, err := readStat(pid); err == nil && st.start == start {
			t.Errorf("child %d still there (state %s) after headroom-stress exited", pid, st.state)
		}
	}
}

// TestChildrenDieWithParent kills the process outright: its children must
// not outlive it (PR_SET_PDEATHSIG).
func TestChildrenDieWithParent(t *testing.T) {
	t.Parallel()
	s := start(t, nil, "--procs", "3")
	s.waitFor("procs=3", 10*time.Second, func(st status) bool { return st.procs == 3 })
	if kids := s.children(); len(kids) != 3 {
		t.Fatalf("%d children, want 3", len(kids))
	}
	s.cmd.Process.Kill()
	<-s.done
	s.checkChildrenGone(5 * time.Second)
}

// pidsCgroup returns the directory of the pids controller's hierarchy
// (cgroup v1) or of the unified hierarchy if it delegates pids (v2).
func pidsCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		requireEnv(t, "needs root to make a pids cgroup")
	}
	const v1 = "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(v1, "cgroup.procs")); err == nil {
		return v1
	}
	const v2 = "/sys/fs/cgroup"
	if data, err := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control")); err == nil && strings.Contains(" "+strings.TrimSpace(string(data))+" ", " pids ") {
		return v2
	}
	requireEnv(t, "no pids cgroup: neither %s (v1) nor pids in %s/cgroup.subtree_control (v2)", v1, v2)
	return ""
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// TestPIDLimit runs headroom-stress in a cgroup whose pids.max it asks
// more than: the clones and forks past it fail, are counted, and the
// process stays alive, printing, holding the cgroup at pids.max, and
// still exits 0 on SIGTERM.
func TestPIDLimit(t *testing.T) {
	t.Parallel()
	root := pidsCgroup(t)
	const max = 16
	dir := filepath.Join(root, fmt.Sprintf("headroom-stress-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before start's cleanup, so it runs after it: the process
	// is gone by then.
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := syscall.Rmdir(dir)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				return
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				t.Errorf("removing %s: %v (cgroup.procs: %q)", dir, err, procs)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shell moves itself into the cgroup and then becomes
	// headroom-stress: every thread and child it makes is charged there.
	s := start(t, []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(dir, "cgroup.procs")},
		"--procs", "12", "--threads", "12")
	first := s.waitFor("failed>0", 20*time.Second, func(st status) bool { return st.failed > 0 })
	if first.procs+first.threads >= 24 {
		t.Fatalf("%v: everything held despite pids.max %d", first, max)
	}
	// It stays alive and keeps printing, the missing ones are retried for
	// every line, so the count of failures grows with each, and the cgroup
	// stays full.
	last := first
	for range 3 {
		next := s.next(5 * time.Second)
		if next.failed <= last.failed || next.procs != first.procs || next.threads != first.threads {
			t.Errorf("%v after %v: the held counts must stay and failed must grow", next, last)
		}
		last = next
	}
	if s.exited() {
		t.Fatalf("headroom-stress exited: %v; stderr:\n%s", s.err, s.stderr.String())
	}
	if cur := readInt(t, filepath.Join(dir, "pids.current")); cur != max {
		t.Errorf("pids.current %d, want pids.max %d", cur, max)
	}
	s.checkHeld(last)
	// The cgroup holds exactly the process's threads and its children.
	kids := s.children()
	if got := statusField(t, s.pid(), "Threads") + int64(len(kids)); got != max {
		t.Errorf("threads %d + children %d = %d tasks, want pids.max %d", statusField(t, s.pid(), "Threads"), len(kids), got, max)
	}
	// Stopping needs no new task either.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d on SIGTERM with the PID budget spent, want 0; stderr:\n%s", code, s.stderr.String())
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--procs", "-1"}, "--procs"},
		{[]string{"--threads", "-3"}, "--threads"},
		{[]string{"--procs", "1048577"}, "--procs"},
		{[]string{"--threads", "99999999999"}, "--threads"},
		{[]string{"--procs", "many"}, "--procs"},
		{[]string{"--memory", "lots"}, "--memory"},
		{[]string{"--memory", "-1Gi"}, "--memory"},
		{[]string{"--memory", "100Ei"}, "--memory"},
		{[]string{"--memory", "1Ei"}, "--memory"},
		{[]string{"--ramp", "-1s"}, "--ramp"},
		{[]string{"--hold", "soon"}, "--hold"},
		{[]string{"--nope"}, "--nope"},
		{[]string{"extra"}, "extra"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want code 2; stderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not name %s", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing held or printed", stdout.String())
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	const machine = 8 << 30
	for _, tc := range []struct {
		args []string
		want options
	}{
		{nil, options{}},
		{[]string{"--procs", "5", "--threads", "7"}, options{procs: 5, threads: 7}},
		{[]string{"--procs=1048576"}, options{procs: maxCount}},
		{[]string{"--memory", "64Mi"}, options{memory: 64 << 20}},
		{[]string{"--memory", "1.5Gi"}, options{memory: 3 << 29}},
		{[]string{"--memory", "1G"}, options{memory: 1e9}},
		// A fraction of a byte is a byte.
		{[]string{"--memory", "100m"}, options{memory: 1}},
		{[]string{"--memory", "8Gi"}, options{memory: machine}},
		{[]string{"--ramp", "2s", "--hold", "1m"}, options{ramp: 2 * time.Second, hold: time.Minute}},
		{[]string{"--drain", "5s"}, options{drain: 5 * time.Second}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseFlags(tc.args, machine, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%+v, want %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args    []string
		machine int64
		want    string
	}{
		{[]string{"--procs", "-1"}, machine, "--procs -1: must not be negative"},
		{[]string{"--threads", "1048577"}, machine, "--threads 1048577: more than 1048576"},
		{[]string{"--memory", "1x"}, machine, `--memory "1x"`},
		{[]string{"--memory", "-1"}, machine, "--memory -1: must not be negative"},
		{[]string{"--memory", "9Ei"}, 0, "--memory 9Ei: does not fit in 9223372036854775807 bytes"},
		{[]string{"--memory", "1e19"}, 0, "--memory 1e19: does not fit"},
		{[]string{"--memory", "8Gi", "--procs", "1"}, machine - 1, "--memory 8Gi: more than this machine's memory"},
		{[]string{"--hold", "-1ms"}, machine, "--hold -1ms: must not be negative"},
		{[]string{"--drain", "-2s"}, machine, "--drain -2s: must not be negative"},
		{[]string{"--ramp", "x"}, machine, `"--ramp"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseFlags(tc.args, tc.machine, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
