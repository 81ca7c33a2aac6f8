package controlplane

import (
	"sync"
	"time"
)

// Supervised is a process restarted whenever it exits, as the kubelet
// restarts a container of a pod with restartPolicy Always: after a back-off
// that starts at Backoff and doubles up to MaxBackoff (the kubelet's are
// 10 s and 5 min), reset once the process has run for 10 × MaxBackoff.
type Supervised struct {
	cp         *ControlPlane
	backoff    time.Duration
	maxBackoff time.Duration

	mu       sync.Mutex
	current  *Process
	restarts []time.Time
	stop     chan struct{}
	done     chan struct{}
}

// Supervise restarts p whenever it exits until the control plane stops or
// Stop is called. backoff ≤ 0 means the kubelet's 10 s.
func (cp *ControlPlane) Supervise(p *Process, backoff time.Duration) *Supervised {
	if backoff <= 0 {
		backoff = 10 * time.Second
	}
	s := &Supervised{cp: cp, backoff: backoff, maxBackoff: 30 * backoff, current: p,
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *Supervised) run() {
	defer close(s.done)
	delay := s.backoff
	for {
		p := s.Current()
		started := time.Now()
		select {
		case <-s.stop:
			return
		case <-p.done:
		}
		if time.Since(started) > 10*s.maxBackoff {
			delay = s.backoff
		}
		select {
		case <-s.stop:
			return
		case <-time.After(delay):
		}
		np, err := s.cp.Restart(p)
		if err != nil { // the control plane stopped
			return
		}
		s.mu.Lock()
		s.current = np
		s.restarts = append(s.restarts, time.Now())
		s.mu.Unlock()
		delay = min(2*delay, s.maxBackoff)
	}
}

// Current is the process running now (or the one that last exited).
func (s *Supervised) Current() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Restarts returns when the process was restarted.
func (s *Supervised) Restarts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.restarts...)
}

// Stop ends the supervision and stops the process.
func (s *Supervised) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.Current().Stop(10 * time.Second)
}
