package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one control-plane or Headroom binary started by the harness.
// Its output goes to <dir>/<name>.log, which a failing test prints.
type Process struct {
	Name    string
	LogPath string
	// Port is the secure port a Headroom binary serves on, when known.
	Port int
	cmd  *exec.Cmd
	env  []string // added to the environment, kept for Restart
	done chan struct{}
	err  error
}

// startProcess starts bin with args in its own process group. Unless detached,
// the kernel kills it (SIGKILL) when the process that started it dies, so a
// test binary that panics, times out or is killed leaves nothing behind.
// Its log and pid file go to dir; it runs in workDir with env added to
// the environment.
func startProcess(dir, workDir, name, bin string, detached bool, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = workDir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, env: env, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if detached {
		if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Pid is the process ID, e.g. to read /proc/<pid>/status.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Wait waits for the process to end on its own, at most timeout.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", p.Name, timeout)
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if exited, _ := p.Exited(); exited {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Log returns the last n bytes of the process's output.
func (p *Process) Log(n int64) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if int64(len(data)) > n {
		data = data[int64(len(data))-n:]
	}
	return string(data)
}

// StopDetached stops the processes a detached control plane recorded in dir
// (their <name>.pid files), newest first, and waits until they are gone.
func StopDetached(dir string) error {
	var errs []error
	for _, name := range []string{"headroom-descheduler", "headroom-scheduler", "kube-scheduler", "kubelet", "containerd", "kwok", "kube-controller-manager", "kube-apiserver", "etcd"} {
		pidFile := filepath.Join(dir, name+".pid")
		data, err := os.ReadFile(pidFile)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pidFile, err))
			continue
		}
		if err := killAndWait(pid, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d): %w", name, pid, err))
			continue
		}
		os.Remove(pidFile)
	}
	if _, err := os.Stat(filepath.Join(dir, serviceIPMarker)); err == nil {
		if err := removeServiceIP(); err != nil {
			errs = append(errs, err)
		} else {
			os.Remove(filepath.Join(dir, serviceIPMarker))
		}
	}
	return errors.Join(errs...)
}

// StopDetachedProcess stops the one process name that a detached control
// plane recorded in dir, if it runs, and waits until it is gone.
func StopDetachedProcess(dir, name string) error {
	pidFile := filepath.Join(dir, name+".pid")
	data, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	if err := killAndWait(pid, 10*time.Second); err != nil {
		return fmt.Errorf("%s (pid %d): %w", name, pid, err)
	}
	return os.Remove(pidFile)
}

func killAndWait(pid int, grace time.Duration) error {
	// Each detached process leads its own session and process group.
	if err := syscall.Kill(-pid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)
	if alive(pid) {
		return errors.New("still running after SIGKILL")
	}
	return nil
}

// alive reports whether pid runs. A detached process whose parent is gone
// may linger as a zombie until init reaps it: that counts as ended.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}
